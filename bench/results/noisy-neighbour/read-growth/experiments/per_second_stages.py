# per_second_stages.py DIR: the p99 (upper bound of its bucket, ms) of some /metrics histograms per second, from scrapes DIR/m00.txt, m01.txt, ... taken a second apart
import sys, glob
files = sorted(glob.glob(sys.argv[1] + '/m*.txt'))
series = {
 'durable': 'headway_produce_stage_seconds_bucket{le="%s",stage="durable",size="small"}',
 'total': 'headway_produce_stage_seconds_bucket{le="%s",stage="total",size="small"}',
 'sync': 'headway_sync_seconds_bucket{le="%s",size="small"}',
 'wake': 'headway_runtime_wake_seconds_bucket{le="%s"}',
 'ftail': 'headway_fetch_stage_seconds_bucket{le="%s",stage="total",kind="tail"}',
 'fwait': 'headway_fetch_stage_seconds_bucket{le="%s",stage="wait",kind="tail"}',
 'freply': 'headway_fetch_stage_seconds_bucket{le="%s",stage="reply",kind="tail"}',
}
def load(f):
    d = {}
    for l in open(f):
        if l.startswith('#'): continue
        k, _, v = l.rpartition(' ')
        d[k] = float(v)
    return d
snaps = [load(f) for f in files]
def buckets(d, pat):
    out = []
    pre, post = pat.split('%s')
    for k, v in d.items():
        if k.startswith(pre) and k.endswith(post):
            le = k[len(pre):-len(post)]
            out.append((float('inf') if le == '+Inf' else float(le), v))
    return sorted(out)
def q(a, b, pat, p=0.99):
    ba, bb = buckets(a, pat), buckets(b, pat)
    d = [(le, vb - va) for (le, va), (_, vb) in zip(ba, bb)]
    n = d[-1][1] if d else 0
    if n == 0: return '-'
    for le, c in d:
        if c >= p * n: return ('%.2g' % (le * 1000)) + ('' if c < n else '')
    return 'inf'
print('sec ' + ' '.join('%7s' % k for k in series))
for i in range(1, len(snaps)):
    print('%3d ' % i + ' '.join('%7s' % q(snaps[i-1], snaps[i], pat) for pat in series.values()))
