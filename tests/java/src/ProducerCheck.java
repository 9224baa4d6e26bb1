import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A KafkaProducer with the client's DEFAULT settings (since kafka-clients 3.0 that means
 * enable.idempotence=true and acks=all) sends test records 0..N-1 to one topic, keyed, with
 * headers, letting the default partitioner spread them, then flushes and closes.
 *
 * Usage: ProducerCheck --bootstrap HOST:PORT --topic T --count N [--set key=value]...
 *
 * Prints one JSON line: {"event":"done","acked":A,"failed":F,"errors":{"Class: message":n},
 * "placements":[[seq,partition,offset],...] (acknowledged records only),"elapsed_ms":...},
 * or {"event":"error","error":"Class: message"} and exit status 1 when the producer could
 * not even be created.
 */
public final class ProducerCheck {
    private static final int ERROR_KINDS_MAX = 20;

    public static void main(String[] argv) {
        Args args = Args.parse(argv);
        String topic = args.get("topic");
        int count = Math.toIntExact(args.getLong("count"));

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        args.applySettings(props);

        int[] partitionOf = new int[count];
        long[] offsetOf = new long[count];
        java.util.Arrays.fill(partitionOf, -1);
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        Map<String, Long> errors = new ConcurrentHashMap<>();
        long started = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                final int seq = i;
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, null, null,
                        TestRecords.key(seq), TestRecords.value(seq), TestRecords.headers(seq));
                try {
                    producer.send(record, (metadata, exception) -> {
                        if (exception != null) {
                            failed.incrementAndGet();
                            countError(errors, Json.error(exception));
                        } else {
                            partitionOf[seq] = metadata.partition();
                            offsetOf[seq] = metadata.offset();
                            acked.incrementAndGet();
                        }
                    });
                } catch (Exception e) {
                    // send() itself throws once the producer is in a fatal state.
                    failed.incrementAndGet();
                    countError(errors, "send() threw " + Json.error(e));
                }
            }
            producer.flush();
            producer.close(Duration.ofSeconds(60));
        } catch (Exception e) {
            Json.emit(Json.obj("event", "error", "error", Json.error(e),
                    "acked", acked.get(), "failed", failed.get(), "errors", new TreeMap<>(errors)));
            System.exit(1);
        }
        // close() has returned: every callback has run, so the arrays are complete.
        List<long[]> placements = new ArrayList<>();
        for (int seq = 0; seq < count; seq++) {
            if (partitionOf[seq] >= 0) placements.add(new long[] {seq, partitionOf[seq], offsetOf[seq]});
        }
        Map<String, Object> done = new LinkedHashMap<>();
        done.put("event", "done");
        done.put("acked", acked.get());
        done.put("failed", failed.get());
        done.put("errors", new TreeMap<>(errors));
        done.put("placements", placements);
        done.put("elapsed_ms", (System.nanoTime() - started) / 1_000_000);
        Json.emit(done);
    }

    private static void countError(Map<String, Long> errors, String error) {
        if (errors.size() < ERROR_KINDS_MAX || errors.containsKey(error)) {
            errors.merge(error, 1L, Long::sum);
        }
    }
}
