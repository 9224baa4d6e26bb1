# sample_budget.py METRICS_PORT SECONDS OUT: every 100 ms, the bulk rate and the disk (vda) reads since the last sample, with the read counters of /metrics
import sys, time, urllib.request
mport, secs, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def disk():
    for l in open('/proc/diskstats'):
        f = l.split()
        if f[2] == 'vda':
            return int(f[3]), int(f[5]), int(f[11]), int(f[7]), int(f[10])  # reads, sectors, inflight, writes, ms writing
def metric(names):
    body = urllib.request.urlopen(f'http://127.0.0.1:{mport}/metrics', timeout=2).read().decode()
    vals = {}
    for l in body.splitlines():
        for n in names:
            if l.startswith(n + ' '):
                vals[n] = float(l.split()[1])
    return vals
names = ['headway_bulk_rate_bytes', 'headway_bulk_rate_bytes{work="read"}', 'headway_bulk_rate_decreases_total', 'headway_reads_pooled_total', 'headway_reads_pooled_cached_total']
t0 = time.time(); prev = disk()
with open(out, 'w') as f:
    while time.time() - t0 < secs:
        time.sleep(0.1)
        d = disk(); m = metric(names)
        f.write(f"{time.time()-t0:.1f} reads {d[0]-prev[0]} MB {(d[1]-prev[1])*512/1e6:.1f} inflight {d[2]} " + " ".join(f"{k.replace('headway_','')}={v:.0f}" for k, v in m.items()) + "\n")
        prev = d
