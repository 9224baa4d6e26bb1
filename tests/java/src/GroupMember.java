import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A long-lived KafkaConsumer in a group, with the client's default settings plus
 * group.id (and whatever --set adds, e.g. group.protocol=consumer): subscribes to one
 * topic and consumes until its standard input closes, committing with commitSync()
 * after each poll that returned records; then closes (leaving the group).
 *
 * Usage: GroupMember --bootstrap HOST:PORT --topic T --group G [--commit-failures report]
 *            [--set key=value]...
 *
 * With `--commit-failures report`, a commit the group refuses because it rebalances
 * (CommitFailedException, RebalanceInProgressException: an eager classic group that
 * members join and leave) does not end the member: its records are printed with
 * "committed":false, and the next owner of their partitions reads them again.
 *
 * Prints one JSON line per event:
 *   {"event":"assigned","partitions":[...]} and {"event":"revoked","partitions":[...]}
 *       from the rebalance listener (incremental with the consumer protocol);
 *   {"event":"records","records":[[partition,offset],...]} for each poll with records,
 *       printed once their offsets are committed;
 *   {"event":"closed"} after close() returned;
 *   {"event":"error","error":"Class: message"} and exit status 1 on an exception.
 */
public final class GroupMember {
    private static final Duration CALL_TIMEOUT = Duration.ofSeconds(60);

    public static void main(String[] argv) {
        Args args = Args.parse(argv);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        args.applySettings(props);
        boolean reportCommitFailures = args.get("commit-failures", "fail").equals("report");

        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // Nothing is sent: the test closes standard input to stop the member.
                }
            } catch (Exception e) {
                // Closed either way.
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args.get("topic")), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    Json.emit(Json.obj("event", "assigned", "partitions", numbers(partitions)));
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    Json.emit(Json.obj("event", "revoked", "partitions", numbers(partitions)));
                }
            });
            while (!stop.get()) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                if (batch.isEmpty()) continue;
                List<long[]> records = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    records.add(new long[] {r.partition(), r.offset()});
                }
                boolean committed = true;
                try {
                    consumer.commitSync(CALL_TIMEOUT);
                } catch (CommitFailedException | RebalanceInProgressException e) {
                    if (!reportCommitFailures) throw e;
                    committed = false;
                }
                Json.emit(Json.obj("event", "records", "records", records, "committed", committed));
            }
        } catch (Exception e) {
            Json.emit(Json.obj("event", "error", "error", Json.error(e)));
            System.exit(1);
            return;
        }
        Json.emit(Json.obj("event", "closed"));
    }

    private static List<Integer> numbers(Collection<TopicPartition> partitions) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : partitions) out.add(tp.partition());
        out.sort(null);
        return out;
    }
}
