import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The drain side of bench/parallelism_share.py: N consumer threads of one group (classic
 * KafkaConsumer or KafkaShareConsumer), each "processing" a record by waiting --io-ms
 * before taking the next. Prints JSON lines on stdout:
 *
 *   {"event":"ready","members_per_partition":[..]}
 *                                          every consumer is in the group (classic:
 *                                          min(consumers, partitions) consumers own
 *                                          partitions, all partitions owned, for 1 s;
 *                                          share: every consumer
 *                                          polled, and ShareGroupDescribe shows all
 *                                          members, each with partitions, every
 *                                          partition assigned, at one group epoch for
 *                                          6 s)
 *   {"event":"record","c":..,"p":..,"o":..,"v":"..","t":ms,"d":n}
 *                                          a record processed: consumer, partition,
 *                                          offset, value, wall-clock ms when processing
 *                                          ended, delivery count (-1 for classic)
 *   {"event":"done","distinct":n,"timed_out":bool}
 *   {"event":"error","error":"..."}
 *
 * It stops when --expect distinct records were processed (then every consumer finishes
 * the batch in hand, so redeliveries still in flight are seen) or --deadline-s after
 * "ready"; the consumers have --join-s to get ready.
 *
 *   --bootstrap B --topic T --group G --mode classic|share --consumers N --expect N
 *   [--io-ms 40] [--join-s 80] [--deadline-s 120] [--partitions 10] [--set-reset true]
 *   [--share-props k=v,k=v]   settings of the share consumers on top of the defaults
 *
 * --set-reset sets the share group's share.auto.offset.reset=earliest with the Admin
 * client (IncrementalAlterConfigs on the group) before the consumers start.
 */
public final class SpikeDrain {
    static final ConcurrentHashMap<String, AtomicInteger> SEEN = new ConcurrentHashMap<>();
    static final AtomicInteger DISTINCT = new AtomicInteger();
    static volatile boolean stop = false;
    static final Object OUT = new Object();
    static final long SETTLE_MS = 6_000;
    static final long CLASSIC_SETTLE_MS = 1_000;
    static volatile String lastState = "not described";

    public static void main(String[] argv) {
        try {
            drain(argv);
        } catch (Throwable e) {
            // The consumer threads are not daemons: without this the JVM would outlive main.
            emit("{\"event\":\"error\",\"error\":" + quote(e.toString()) + "}");
            System.exit(1);
        }
    }

    static void drain(String[] argv) throws Exception {
        Map<String, String> a = new java.util.HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String bootstrap = a.get("bootstrap");
        String topic = a.get("topic");
        String group = a.get("group");
        String mode = a.getOrDefault("mode", "classic");
        int consumers = Integer.parseInt(a.getOrDefault("consumers", "10"));
        int expect = Integer.parseInt(a.get("expect"));
        long ioMs = Long.parseLong(a.getOrDefault("io-ms", "40"));
        long deadlineMs = (long) (Double.parseDouble(a.getOrDefault("deadline-s", "120")) * 1000);
        int partitions = Integer.parseInt(a.getOrDefault("partitions", "10"));
        String shareProps = a.getOrDefault("share-props", "");
        long joinEnd = System.currentTimeMillis()
                + (long) (Double.parseDouble(a.getOrDefault("join-s", "80")) * 1000);

        if (mode.equals("share") && Boolean.parseBoolean(a.getOrDefault("set-reset", "false"))) {
            Properties ap = new Properties();
            ap.put("bootstrap.servers", bootstrap);
            try (Admin admin = Admin.create(ap)) {
                ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
                admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                        new ConfigEntry("share.auto.offset.reset", "earliest"),
                        AlterConfigOp.OpType.SET)))).all().get(30, TimeUnit.SECONDS);
            }
        }

        CountDownLatch ready = new CountDownLatch(mode.equals("share") ? consumers : 0);
        // Classic: each consumer's current partitions, kept by its rebalance listener.
        Map<Integer, Set<TopicPartition>> owned = new ConcurrentHashMap<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            int id = i;
            Runnable body = mode.equals("share")
                    ? () -> share(bootstrap, topic, group, id, ioMs, ready, shareProps)
                    : () -> classic(bootstrap, topic, group, id, ioMs, owned);
            Thread t = new Thread(() -> {
                try {
                    body.run();
                } catch (Exception e) {
                    emit("{\"event\":\"error\",\"error\":" + quote(e.toString()) + "}");
                }
            }, mode + "-" + i);
            t.start();
            threads.add(t);
        }
        long joinLeft = Math.max(1, joinEnd - System.currentTimeMillis());
        if (!ready.await(joinLeft, TimeUnit.MILLISECONDS)) {
            stop = true;
            emit("{\"event\":\"error\",\"error\":\"the consumers did not join in time: "
                    + ready.getCount() + " not ready\"}");
            joinAll(threads);
            System.exit(1);
        }
        String spread = mode.equals("share")
                ? awaitShareAssignment(bootstrap, group, consumers, partitions, joinEnd)
                : awaitClassicAssignment(owned, consumers, partitions, joinEnd);
        if (spread == null) {
            stop = true;
            emit("{\"event\":\"error\",\"error\":\"the group's assignment did not settle "
                    + "in time: " + lastState + "\"}");
            joinAll(threads);
            System.exit(1);
        }
        emit("{\"event\":\"ready\",\"members_per_partition\":" + spread + "}");
        long end = System.currentTimeMillis() + deadlineMs;
        boolean timedOut = false;
        while (DISTINCT.get() < expect) {
            if (System.currentTimeMillis() > end) {
                timedOut = true;
                break;
            }
            Thread.sleep(5);
        }
        stop = true;
        joinAll(threads);
        emit("{\"event\":\"done\",\"distinct\":" + DISTINCT.get() + ",\"timed_out\":"
                + timedOut + "}");
        System.exit(0);
    }

    /**
     * Waits (polling ShareGroupDescribe) until the share group has every consumer as a
     * member, each with partitions, every partition assigned, and the group epoch unchanged
     * for SETTLE_MS (longer than a heartbeat interval, 5 s in both brokers, so every member
     * has heard its assignment); returns the members per partition as a JSON array, or null
     * at the deadline.
     */
    static String awaitShareAssignment(String bootstrap, String group, int consumers,
                                       int partitions, long end) throws Exception {
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        int lastEpoch = -1;
        long since = 0;
        try (Admin admin = Admin.create(ap)) {
            while (System.currentTimeMillis() < end) {
                ShareGroupDescription d;
                try {
                    d = admin.describeShareGroups(List.of(group))
                            .describedGroups().get(group).get(30, TimeUnit.SECONDS);
                } catch (java.util.concurrent.ExecutionException e) {
                    // The first polls can return before the first heartbeat made the group.
                    if (!(e.getCause() instanceof GroupIdNotFoundException)) {
                        throw e;
                    }
                    lastState = "group not found";
                    Thread.sleep(200);
                    continue;
                }
                int[] per = new int[partitions];
                boolean complete = d.members().size() == consumers;
                for (ShareMemberDescription m : d.members()) {
                    Set<TopicPartition> tps = m.assignment().topicPartitions();
                    complete &= !tps.isEmpty();
                    for (TopicPartition tp : tps) {
                        if (tp.partition() < partitions) {
                            per[tp.partition()]++;
                        }
                    }
                }
                for (int n : per) {
                    complete &= n > 0;
                }
                long withPartitions = d.members().stream()
                        .filter(m -> !m.assignment().topicPartitions().isEmpty()).count();
                lastState = "group epoch " + d.groupEpoch() + ", " + d.members().size()
                        + " members, " + withPartitions + " with partitions, per partition "
                        + java.util.Arrays.toString(per);
                long now = System.currentTimeMillis();
                if (!complete || d.groupEpoch() != lastEpoch) {
                    lastEpoch = complete ? d.groupEpoch() : -1;
                    since = now;
                } else if (now - since >= SETTLE_MS) {
                    return java.util.Arrays.toString(per);
                }
                Thread.sleep(200);
            }
        }
        return null;
    }

    static void joinAll(List<Thread> threads) throws InterruptedException {
        for (Thread t : threads) {
            t.join(60_000);
        }
    }

    static Properties props(String bootstrap, String group, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", clientId);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        return p;
    }

    /**
     * Classic group: waits until min(consumers, partitions) consumers own partitions and
     * every partition is owned, unchanged for CLASSIC_SETTLE_MS (the first consumer to join
     * gets every partition, then gives them up as the others join); returns the owners per
     * partition as a JSON array, or null at the deadline.
     */
    static String awaitClassicAssignment(Map<Integer, Set<TopicPartition>> owned, int consumers,
                                         int partitions, long end) throws InterruptedException {
        String last = "";
        long since = System.currentTimeMillis();
        while (System.currentTimeMillis() < end) {
            int[] per = new int[partitions];
            int owners = 0;
            for (Set<TopicPartition> tps : owned.values()) {
                owners += tps.isEmpty() ? 0 : 1;
                for (TopicPartition tp : tps) {
                    if (tp.partition() < partitions) {
                        per[tp.partition()]++;
                    }
                }
            }
            boolean complete = owners == Math.min(consumers, partitions);
            for (int n : per) {
                complete &= n > 0;
            }
            String state = owners + " consumers own partitions, per partition "
                    + java.util.Arrays.toString(per);
            long now = System.currentTimeMillis();
            if (!complete || !state.equals(last)) {
                last = state;
                lastState = state;
                since = now;
            } else if (now - since >= CLASSIC_SETTLE_MS) {
                return java.util.Arrays.toString(per);
            }
            Thread.sleep(50);
        }
        return null;
    }

    static void classic(String bootstrap, String topic, String group, int id, long ioMs,
                        Map<Integer, Set<TopicPartition>> owned) {
        Set<TopicPartition> mine = ConcurrentHashMap.newKeySet();
        owned.put(id, mine);
        Properties p = props(bootstrap, group, "classic-" + id);
        p.put("auto.offset.reset", "earliest");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    mine.addAll(parts);
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    mine.removeAll(parts);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    mine.removeAll(parts);
                }
            });
            while (!stop) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(100));
                for (ConsumerRecord<String, String> r : records) {
                    process(id, r, -1, ioMs);
                }
            }
            c.commitSync();
        }
    }

    static void share(String bootstrap, String topic, String group, int id, long ioMs,
                      CountDownLatch ready, String extra) {
        Properties p = props(bootstrap, group, "share-" + id);
        for (String kv : extra.split(",")) {
            int eq = kv.indexOf('=');
            if (eq > 0) {
                p.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(topic));
            boolean first = true;
            while (!stop) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(100));
                if (first) {
                    ready.countDown();
                    first = false;
                }
                for (ConsumerRecord<String, String> r : records) {
                    process(id, r, r.deliveryCount().map(Short::intValue).orElse(-1), ioMs);
                }
            }
            // Implicit mode: the last poll's records are accepted at a poll or a commit.
            c.commitSync();
        }
    }

    static void process(int id, ConsumerRecord<String, String> r, int delivery, long ioMs) {
        try {
            Thread.sleep(ioMs);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        long t = System.currentTimeMillis();
        String key = r.partition() + ":" + r.offset();
        if (SEEN.computeIfAbsent(key, k -> new AtomicInteger()).getAndIncrement() == 0) {
            DISTINCT.incrementAndGet();
        }
        emit("{\"event\":\"record\",\"c\":" + id + ",\"p\":" + r.partition() + ",\"o\":"
                + r.offset() + ",\"v\":" + quote(r.value()) + ",\"t\":" + t + ",\"d\":"
                + delivery + "}");
    }

    static void emit(String line) {
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }
}
