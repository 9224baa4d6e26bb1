import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A KafkaConsumer in a consumer group, with the client's default settings plus group.id
 * (and whatever --set adds): subscribes to one topic, reads --count records, commits with
 * commitSync(), reads its committed offsets back, and closes (leaving the group).
 *
 * Usage: ConsumerCheck --bootstrap HOST:PORT --topic T --group G --count N
 *                      [--deadline-s S] [--set key=value]...
 *
 * Prints one JSON line per event:
 *   {"event":"assigned","partitions":[...],"positions":{"0":12,...}}  once the positions of
 *       newly assigned partitions are known, so a test may produce from then on even with
 *       auto.offset.reset=latest (the default);
 *   {"event":"revoked","partitions":[...]};
 *   {"event":"done","count":N,"records":[[partition,offset,seq],...],"problems":[...],
 *    "committed":{"0":offset,...},"timed_out":false,"elapsed_ms":...};
 *   {"event":"closed","close_ms":...} after close() returned;
 *   {"event":"error","error":"Class: message"} and exit status 1 on an exception.
 * Records are checked byte for byte against TestRecords; "problems" lists what differs.
 */
public final class ConsumerCheck {
    private static final int PROBLEMS_MAX = 50;
    private static final Duration CALL_TIMEOUT = Duration.ofSeconds(60);

    public static void main(String[] argv) {
        Args args = Args.parse(argv);
        String topic = args.get("topic");
        long count = args.getLong("count");
        long deadlineNs = System.nanoTime() + args.getLong("deadline-s", 180) * 1_000_000_000L;

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        args.applySettings(props);

        long started = System.nanoTime();
        long closing;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    // position() resolves the starting offset now (committed offset, or
                    // auto.offset.reset), so "assigned" means records produced from here on
                    // will be read.
                    Map<String, Object> positions = new TreeMap<>();
                    for (TopicPartition tp : partitions) {
                        positions.put(Integer.toString(tp.partition()), consumer.position(tp, CALL_TIMEOUT));
                    }
                    Json.emit(Json.obj("event", "assigned", "partitions", numbers(partitions),
                            "positions", positions));
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    Json.emit(Json.obj("event", "revoked", "partitions", numbers(partitions)));
                }
            });

            List<long[]> records = new ArrayList<>();
            List<String> problems = new ArrayList<>();
            boolean timedOut = false;
            while (records.size() < count) {
                if (System.nanoTime() > deadlineNs) {
                    timedOut = true;
                    break;
                }
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    long seq;
                    try {
                        seq = TestRecords.seqOf(r.value());
                    } catch (IllegalArgumentException e) {
                        addProblem(problems, "partition " + r.partition() + " offset " + r.offset()
                                + ": " + e.getMessage());
                        seq = -1;
                    }
                    if (seq >= 0) {
                        String problem = TestRecords.problem(r, seq);
                        if (problem != null) addProblem(problems, problem);
                    }
                    records.add(new long[] {r.partition(), r.offset(), seq});
                }
            }

            consumer.commitSync(CALL_TIMEOUT);
            Map<String, Object> committed = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e
                    : consumer.committed(consumer.assignment(), CALL_TIMEOUT).entrySet()) {
                committed.put(Integer.toString(e.getKey().partition()),
                        e.getValue() == null ? null : e.getValue().offset());
            }
            Map<String, Object> done = new LinkedHashMap<>();
            done.put("event", "done");
            done.put("count", records.size());
            done.put("records", records);
            done.put("problems", problems);
            done.put("committed", committed);
            done.put("timed_out", timedOut);
            done.put("elapsed_ms", (System.nanoTime() - started) / 1_000_000);
            Json.emit(done);
            closing = System.nanoTime(); // close() leaves the group, default timeout 30 s
        } catch (Exception e) {
            Json.emit(Json.obj("event", "error", "error", Json.error(e)));
            System.exit(1);
            return;
        }
        Json.emit(Json.obj("event", "closed", "close_ms", (System.nanoTime() - closing) / 1_000_000));
    }

    private static List<Integer> numbers(Collection<TopicPartition> partitions) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : partitions) out.add(tp.partition());
        out.sort(null);
        return out;
    }

    private static void addProblem(List<String> problems, String problem) {
        if (problems.size() < PROBLEMS_MAX) problems.add(problem);
    }
}
