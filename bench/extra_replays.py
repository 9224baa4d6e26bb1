"""Extra catch-up readers for `headway bench noisy-neighbour`: N confluent-kafka
consumers replay the scenario's light topic from offset 0, each as fast as it can, until
it reaches the high watermark it saw at its start or 20 s have passed, then print what
it read. Started by hand when phase 3's warm-up ends, to put more replays beside the
scenario's own catch-up reader.

    bench/.venv/bin/python bench/extra_replays.py 127.0.0.1:9092 2
"""

import multiprocessing as mp
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

TIME_MAX_S = 20.0


def light_topic(bootstrap):
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return next(t for t in topics if "noisy-neighbour-light" in t)


def replay(bootstrap, topic, i):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"extra-replay-{i}",
                  "enable.auto.commit": False})
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    start = time.time()
    nbytes = 0
    done = False
    while not done and time.time() - start < TIME_MAX_S:
        for m in c.consume(1000, 0.1):
            if m.error() is None:
                nbytes += len(m.value() or b"")
                done = done or m.offset() >= high - 1
    c.close()
    print(f"extra-replay-{i}: {nbytes / 1e6:.0f} MB in {time.time() - start:.1f} s", flush=True)


def main():
    bootstrap, n = sys.argv[1], int(sys.argv[2])
    topic = light_topic(bootstrap)
    readers = [mp.Process(target=replay, args=(bootstrap, topic, i)) for i in range(n)]
    for r in readers:
        r.start()
    for r in readers:
        r.join()


if __name__ == "__main__":
    main()
