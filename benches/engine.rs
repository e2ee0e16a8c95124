//! Micro-benchmarks of the engine alone (no sockets): what one command
//! costs under the lock.
//!
//!     cargo bench --bench engine
//!     cargo bench --bench engine -- '1M puts'   (unique keys against none)
use std::sync::{Arc, Condvar};

use beanstalk::engine::{ClientId, Engine, NewJob};
use beanstalk::protocol::{PutTags, TubeName, UniqueKey};
use beanstalk::time::Time;
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};

fn job(engine: &mut Engine, client: ClientId, pri: u32) -> NewJob {
    NewJob {
        ticket: engine.start_put(client, 100).expect("no memory limit"),
        pri,
        delay: 0,
        ttr: 60,
        created: Time::ZERO,
        body: Box::from(&[b'x'; 100][..]),
        tags: PutTags::NONE,
    }
}

fn put_reserve_delete(c: &mut Criterion) {
    let mut engine = Engine::new(65535);
    let client = engine.connect(Arc::new(Condvar::new())).unwrap();
    let now = Time::ZERO;
    c.bench_function("put+reserve+delete, empty queue", |b| {
        b.iter(|| {
            let new = job(&mut engine, client, 0);
            engine.put(client, new, now);
            let id = match engine.reserve(client, None, now, &mut Vec::<u8>::new()) {
                Some(beanstalk::protocol::Reply::Reserved(id, _)) => id,
                other => panic!("{other:?}"),
            };
            black_box(engine.delete(client, id, now));
        })
    });
}

fn reserve_from_a_deep_queue(c: &mut Criterion) {
    c.bench_function("put+reserve+delete, 100k jobs queued", |b| {
        b.iter_batched_ref(
            || {
                let mut engine = Engine::new(65535);
                let client = engine.connect(Arc::new(Condvar::new())).unwrap();
                for i in 0..100_000u32 {
                    let new = job(&mut engine, client, i % 1000);
                    engine.put(client, new, Time::ZERO);
                }
                (engine, client)
            },
            |(engine, client)| {
                for _ in 0..1000 {
                    let new = job(engine, *client, 500);
                    engine.put(*client, new, Time::ZERO);
                    let id = match engine.reserve(*client, None, Time::ZERO, &mut Vec::<u8>::new()) {
                        Some(beanstalk::protocol::Reply::Reserved(id, _)) => id,
                        other => panic!("{other:?}"),
                    };
                    black_box(engine.delete(*client, id, Time::ZERO));
                }
            },
            BatchSize::PerIteration,
        )
    });
}

/// A million puts with unique keys, each key put twice (so half are
/// repeats that store nothing), against the same million puts without
/// keys (reference §3.1a).
fn a_million_keyed_puts_half_repeats(c: &mut Criterion) {
    const PUTS: u32 = 1_000_000;
    let keys: Vec<TubeName> =
        (0..PUTS / 2).map(|i| TubeName::new(format!("key-{i}").as_bytes()).unwrap()).collect();
    let mut group = c.benchmark_group("1M puts");
    group.sample_size(10);
    for keyed in [false, true] {
        let name = if keyed { "keyed, half of them repeats" } else { "without keys" };
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || {
                    let mut engine = Engine::new(65535);
                    let client = engine.connect(Arc::new(Condvar::new())).unwrap();
                    (engine, client)
                },
                |(engine, client)| {
                    for i in 0..PUTS {
                        let mut new = job(engine, *client, 0);
                        if keyed {
                            let name = keys[(i % (PUTS / 2)) as usize].clone();
                            new.tags =
                                PutTags::new(Some(&UniqueKey { name, cooldown: 0 }), None, None).unwrap();
                        }
                        black_box(engine.put(*client, new, Time::ZERO));
                    }
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn parse(c: &mut Criterion) {
    c.bench_function("parse put line", |b| {
        b.iter(|| beanstalk::protocol::parse(black_box(b"put 1024 0 60 100")))
    });
}

criterion_group!(
    benches,
    put_reserve_delete,
    reserve_from_a_deep_queue,
    a_million_keyed_puts_half_repeats,
    parse
);
criterion_main!(benches);
