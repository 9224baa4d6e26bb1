import java.time.Duration;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A KafkaProducer sends the sized test records 0..N-1 (TestRecords.sizedValue, keyed, in
 * order, the default partitioner spreading them) to one topic, with the client's defaults
 * plus --set (batch.size, linger.ms, compression.type, enable.idempotence, acks...), then
 * flushes and closes. With --transactional-id the records go in transactions of
 * --per-transaction records each: a transaction whose index (from 0) is listed in --abort
 * is flushed, so its records are in the log, then aborted; the others are committed.
 *
 * Usage: SizedProducerCheck --bootstrap HOST:PORT --topic T --count N --value-bytes B
 *            [--transactional-id ID --per-transaction M [--abort I,J,...]]
 *            [--set key=value]...
 *
 * Prints one JSON line: {"event":"done","acked":A,"failed":F,"errors":{"Class: message":n},
 * "committed":C,"aborted":X,"elapsed_ms":...} (C and X count transactions), or
 * {"event":"error","error":"Class: message",...} and exit status 1 when the producer or a
 * transaction failed.
 */
public final class SizedProducerCheck {
    private static final int ERROR_KINDS_MAX = 20;

    public static void main(String[] argv) {
        Args args = Args.parse(argv);
        String topic = args.get("topic");
        int count = Math.toIntExact(args.getLong("count"));
        int valueBytes = Math.toIntExact(args.getLong("value-bytes"));
        String transactionalId = args.get("transactional-id", null);
        int perTransaction = Math.toIntExact(args.getLong("per-transaction", count));
        Set<Integer> abort = new HashSet<>();
        for (String index : args.get("abort", "").split(",")) {
            if (!index.isBlank()) abort.add(Integer.parseInt(index.trim()));
        }

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (transactionalId != null) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        args.applySettings(props);

        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        Map<String, Long> errors = new ConcurrentHashMap<>();
        long committed = 0;
        long aborted = 0;
        long started = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            if (transactionalId != null) producer.initTransactions();
            for (int first = 0, index = 0; first < count; first += perTransaction, index++) {
                if (transactionalId != null) producer.beginTransaction();
                for (int seq = first; seq < Math.min(count, first + perTransaction); seq++) {
                    ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, null, null,
                            TestRecords.key(seq), TestRecords.sizedValue(seq, valueBytes),
                            TestRecords.sizedHeaders(seq));
                    producer.send(record, (metadata, exception) -> {
                        if (exception != null) {
                            failed.incrementAndGet();
                            countError(errors, Json.error(exception));
                        } else {
                            acked.incrementAndGet();
                        }
                    });
                }
                if (transactionalId == null) continue;
                if (abort.contains(index)) {
                    // The records reach the log first, so readers have something to skip.
                    producer.flush();
                    producer.abortTransaction();
                    aborted++;
                } else {
                    producer.commitTransaction();
                    committed++;
                }
            }
            producer.flush();
            producer.close(Duration.ofSeconds(60));
        } catch (Exception e) {
            Json.emit(Json.obj("event", "error", "error", Json.error(e), "acked", acked.get(),
                    "failed", failed.get(), "errors", new TreeMap<>(errors)));
            System.exit(1);
        }
        Map<String, Object> done = new LinkedHashMap<>();
        done.put("event", "done");
        done.put("acked", acked.get());
        done.put("failed", failed.get());
        done.put("errors", new TreeMap<>(errors));
        done.put("committed", committed);
        done.put("aborted", aborted);
        done.put("elapsed_ms", (System.nanoTime() - started) / 1_000_000);
        Json.emit(done);
    }

    private static void countError(Map<String, Long> errors, String error) {
        if (errors.size() < ERROR_KINDS_MAX || errors.containsKey(error)) {
            errors.merge(error, 1L, Long::sum);
        }
    }
}
