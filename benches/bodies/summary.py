# Medians of a run's ratios: the first server named in the file (ours)
# against each other one. usage: summary.py FILE KEY[,KEY...]
import json,sys,statistics as st
rows={}
for line in open(sys.argv[1]):
    parts=line.split(' ',2)
    if len(parts)<3 or not parts[2].startswith('{'): continue
    who,r,js=parts; d=json.loads(js)
    rows.setdefault(int(r),{})[who]=d
keys=sys.argv[2].split(',')
names=[]
for r in rows.values():
    for w in r:
        if w not in names: names.append(w)
for k in keys:
    for other in names[1:]:
        ratios=[rows[r]['ours'][k]/rows[r][other][k] for r in rows if 'ours' in rows[r] and other in rows[r] and rows[r][other].get(k)]
        if ratios: print(f"{k}: ours/{other} median {st.median(ratios):.2f} rounds {[round(x,2) for x in ratios]}")
    for who in names:
        v=[rows[r][who][k] for r in rows if who in rows[r] and k in rows[r][who]]
        if v: print(f"   {who} median {st.median(v):.1f}")
