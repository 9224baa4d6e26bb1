import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A KafkaConsumer with the client's default settings and no group: assign() takes every
 * partition of one topic, each is read from its beginning up to the end offset listed when
 * the reading started, and the consumer closes. Without a group nothing is committed, so
 * the program needs no group coordinator (which a cluster of headway brokers does not
 * share yet).
 *
 * Usage: AssignedReaderCheck --bootstrap HOST:PORT --topic T [--deadline-s S]
 *                            [--set key=value]...
 *
 * Prints one JSON line:
 *   {"event":"done","count":N,"records":[[partition,offset,seq],...],"problems":[...],
 *    "end_offsets":{"0":12,...},"timed_out":false,"elapsed_ms":...};
 *   or {"event":"error","error":"Class: message"} and exit status 1 on an exception.
 * Records are checked byte for byte against TestRecords; "problems" lists what differs.
 */
public final class AssignedReaderCheck {
    private static final int PROBLEMS_MAX = 50;
    private static final Duration CALL_TIMEOUT = Duration.ofSeconds(60);

    public static void main(String[] argv) {
        Args args = Args.parse(argv);
        String topic = args.get("topic");
        long deadlineNs = System.nanoTime() + args.getLong("deadline-s", 120) * 1_000_000_000L;

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        args.applySettings(props);

        long started = System.nanoTime();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, CALL_TIMEOUT)) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions, CALL_TIMEOUT);

            List<long[]> records = new ArrayList<>();
            List<String> problems = new ArrayList<>();
            boolean timedOut = false;
            while (!reached(consumer, ends)) {
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
            Map<String, Object> endOffsets = new TreeMap<>();
            for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
                endOffsets.put(Integer.toString(e.getKey().partition()), e.getValue());
            }
            Map<String, Object> done = new LinkedHashMap<>();
            done.put("event", "done");
            done.put("count", records.size());
            done.put("records", records);
            done.put("problems", problems);
            done.put("end_offsets", endOffsets);
            done.put("timed_out", timedOut);
            done.put("elapsed_ms", (System.nanoTime() - started) / 1_000_000);
            Json.emit(done);
        } catch (Exception e) {
            Json.emit(Json.obj("event", "error", "error", Json.error(e)));
            System.exit(1);
        }
    }

    /** Whether every partition's position has reached its listed end offset. */
    private static boolean reached(KafkaConsumer<byte[], byte[]> consumer,
                                   Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            if (consumer.position(e.getKey(), CALL_TIMEOUT) < e.getValue()) return false;
        }
        return true;
    }

    private static void addProblem(List<String> problems, String problem) {
        if (problems.size() < PROBLEMS_MAX) problems.add(problem);
    }
}
