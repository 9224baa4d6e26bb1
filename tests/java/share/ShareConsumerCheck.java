import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Share consumers (KafkaShareConsumer, client defaults) of one share group, as threads of
 * one JVM: each prints a "record" line per record it gets (consumer, partition, offset,
 * value, delivery count) and a "polled" line per poll that returned records (how
 * many), until standard input closes. Each completed acknowledgement (implicit or
 * explicit) prints an "acknowledged" line: its offsets and, if the broker refused it,
 * the error.
 *
 *   --bootstrap B --topic T --group G [--consumers N]
 *   [--release-prefix P]  acknowledge explicitly: release records whose value starts
 *                         with P, accept the rest (otherwise records are accepted
 *                         implicitly by the next poll, the default mode, and by the
 *                         commit made before closing)
 *   [--hold true]         after the first records, stop polling and hold them (the
 *                         process is then killed: its locks must expire)
 *   [--hold-ms M]         acknowledge explicitly: hold the first records M ms, renewing
 *                         their locks every --renew-every-ms R ms if R > 0 (acknowledge
 *                         type RENEW, then polls until they are back: a "renewed"
 *                         line), then accept them ("accepted"); other records are
 *                         accepted at once
 *
 * Compiled against kafka-clients 4.x only (the share consumer is new in 4.x).
 */
public final class ShareConsumerCheck {
    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        int consumers = (int) args.getLong("consumers", 1);
        String releasePrefix = args.get("release-prefix", null);
        boolean hold = Boolean.parseBoolean(args.get("hold", "false"));
        long holdMs = args.getLong("hold-ms", 0);
        long renewEveryMs = args.getLong("renew-every-ms", 0);
        AtomicBoolean stop = new AtomicBoolean(false);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            int id = i;
            Thread t = new Thread(() -> run(args, id, releasePrefix, hold, holdMs, renewEveryMs,
                    stop), "share-" + i);
            t.start();
            threads.add(t);
        }
        Json.emit(Json.obj("event", "started", "consumers", consumers));
        // Runs until standard input closes (or the process is killed).
        while (System.in.read() != -1) {
        }
        stop.set(true);
        for (Thread t : threads) {
            t.join();
        }
        Json.emit(Json.obj("event", "closed"));
    }

    private static void run(Args args, int id, String releasePrefix, boolean hold,
                            long holdMs, long renewEveryMs, AtomicBoolean stop) {
        boolean explicit = releasePrefix != null || holdMs > 0;
        boolean held = false;
        Properties props = new Properties();
        props.put("bootstrap.servers", args.get("bootstrap"));
        props.put("group.id", args.get("group"));
        props.put("client.id", "share-" + id);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        if (explicit) {
            props.put("share.acknowledgement.mode", "explicit");
        }
        args.applySettings(props);
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.setAcknowledgementCommitCallback((offsets, exception) -> {
                long acknowledged = offsets.values().stream().mapToLong(Set::size).sum();
                Json.emit(Json.obj("event", "acknowledged", "consumer", id,
                        "records", acknowledged,
                        "error", exception == null ? null : Json.error(exception)));
            });
            consumer.subscribe(List.of(args.get("topic")));
            while (!stop.get()) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (!records.isEmpty()) {
                    Json.emit(Json.obj("event", "polled", "consumer", id,
                            "records", records.count()));
                }
                for (ConsumerRecord<String, String> r : records) {
                    emitRecord(id, r);
                    if (releasePrefix != null) {
                        boolean release = r.value() != null && r.value().startsWith(releasePrefix);
                        consumer.acknowledge(r, release ? AcknowledgeType.RELEASE
                                : AcknowledgeType.ACCEPT);
                    }
                }
                if (holdMs > 0 && !records.isEmpty()) {
                    if (!held) {
                        held = true;
                        holdAndAccept(consumer, records, id, holdMs, renewEveryMs);
                    } else {
                        for (ConsumerRecord<String, String> r : records) {
                            consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                        }
                        consumer.commitSync();
                    }
                }
                if (releasePrefix != null && !records.isEmpty()) {
                    consumer.commitSync();
                }
                if (hold && !records.isEmpty()) {
                    Json.emit(Json.obj("event", "holding", "consumer", id,
                            "records", records.count()));
                    while (!stop.get()) {
                        Thread.sleep(100);
                    }
                    return;
                }
            }
            // The records of the last poll: in implicit mode the client accepts them at
            // the next poll or at a commit, not at close.
            consumer.commitSync();
        } catch (Exception e) {
            Json.emit(Json.obj("event", "error", "consumer", id, "error", Json.error(e)));
        }
    }

    /** Holds `records` for `holdMs`, renewing their locks every `renewEveryMs` (if > 0),
     * then accepts them. A renewal is an acknowledgement (RENEW) sent by the next poll,
     * which hands the renewed records back; other records it hands out are accepted. */
    private static void holdAndAccept(KafkaShareConsumer<String, String> consumer,
                                      ConsumerRecords<String, String> records, int id,
                                      long holdMs, long renewEveryMs) throws Exception {
        Json.emit(Json.obj("event", "holding", "consumer", id, "records", records.count()));
        Map<Long, ConsumerRecord<String, String>> held = new TreeMap<>();
        for (ConsumerRecord<String, String> r : records) {
            held.put(r.offset(), r);
        }
        long start = System.nanoTime();
        long heldMs = 0;
        while (heldMs < holdMs) {
            long step = renewEveryMs > 0 ? Math.min(renewEveryMs, holdMs - heldMs)
                    : holdMs - heldMs;
            Thread.sleep(step);
            heldMs = (System.nanoTime() - start) / 1_000_000;
            if (renewEveryMs <= 0 || heldMs >= holdMs) {
                continue;
            }
            for (ConsumerRecord<String, String> r : held.values()) {
                consumer.acknowledge(r, AcknowledgeType.RENEW);
            }
            // Poll until every renewed record is back in hand.
            Set<Long> back = new HashSet<>();
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (back.size() < held.size() && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    if (held.containsKey(r.offset())) {
                        back.add(r.offset());
                        held.put(r.offset(), r);
                    } else {
                        emitRecord(id, r);
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                }
            }
            Json.emit(Json.obj("event", "renewed", "consumer", id, "held_ms", heldMs,
                    "back", back.size()));
        }
        for (ConsumerRecord<String, String> r : held.values()) {
            consumer.acknowledge(r, AcknowledgeType.ACCEPT);
        }
        consumer.commitSync();
        Json.emit(Json.obj("event", "accepted", "consumer", id, "held_ms", heldMs));
    }

    private static void emitRecord(int id, ConsumerRecord<String, String> r) {
        Json.emit(Json.obj("event", "record", "consumer", id,
                "partition", r.partition(), "offset", r.offset(),
                "value", r.value(),
                "delivery", r.deliveryCount().map(Short::intValue).orElse(-1)));
    }
}
