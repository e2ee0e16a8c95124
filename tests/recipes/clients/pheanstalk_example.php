<?php
// pheanstalk 5 (the queue driver of Laravel 10 and later; 4, Laravel 6 to
// 9's, has the same seam, with tube names as strings and `Pheanstalk\JobId`):
// its seam is the socket factory, so keep the socket it makes and send any
// line through it. See the README's "From your client". Not run by the
// tests (pheanstalk 5 is a Composer package they cannot fetch):
// tests/client_examples.rs checks its syntax.
use Pheanstalk\Contract\SocketFactoryInterface;
use Pheanstalk\Contract\SocketInterface;
use Pheanstalk\Pheanstalk;
use Pheanstalk\SocketFactory;
use Pheanstalk\Values\JobId;
use Pheanstalk\Values\TubeName;

final class KeptSocket implements SocketFactoryInterface
{
    public ?SocketInterface $socket = null;
    public function __construct(private SocketFactoryInterface $factory) {}
    public function create(): SocketInterface
    {
        return $this->socket ??= $this->factory->create();
    }
}

/** The reply line, and the YAML after OK or [id => body] after RESERVED_BATCH. */
function call(SocketInterface $s, string $line, ?string $body = null): array
{
    $s->write($line . "\r\n" . ($body === null ? '' : $body . "\r\n"));
    $head = $s->getLine();
    [$word, $n] = explode(' ', $head . ' ');
    $data = null;
    if ($word === 'OK') {
        $data = substr($s->read((int) $n + 2), 0, -2);
    } elseif ($word === 'RESERVED_BATCH') {
        $data = [];
        for ($i = 0; $i < (int) $n; $i++) {
            [, $id, $size] = explode(' ', $s->getLine());
            $data[(int) $id] = substr($s->read((int) $size + 2), 0, -2);
        }
    }
    return [$head, $data];
}

$kept = new KeptSocket(new SocketFactory('127.0.0.1', 11300));
$pheanstalk = Pheanstalk::createWithFactory($kept);
$photos = new TubeName('photos');
$pheanstalk->useTube($photos);
$pheanstalk->watch($photos);
$s = $kept->create();   // the socket pheanstalk made and sends through

$body = 'resize 42.jpg';
echo call($s, 'put 0 0 60 ' . strlen($body) . ' idp:resize-42 grp:album-7 max:3', $body)[0], "\n";
echo call($s, 'stats-group album-7')[1], "\n";
[$head, $jobs] = call($s, 'reserve-batch 10');
echo $head, "\n";
foreach ($jobs as $id => $jobBody) {
    $pheanstalk->bury(new JobId($id));
}
echo call($s, 'list-jobs-buried')[1], "\n";
