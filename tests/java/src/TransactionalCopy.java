import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A consume-transform-produce loop with exactly-once semantics, as Kafka's documentation
 * writes it: a read_committed consumer in a group reads --input, a transactional producer
 * writes "copy:" + value for each record to --output with the same key, and sends the
 * consumer's positions with sendOffsetsToTransaction before each commit. Every
 * --abort-every'th transaction first writes records whose value starts with "aborted:"
 * (flushed, so they are in the log), then aborts, and the consumer goes back to its
 * committed positions. Client defaults otherwise (plus --set).
 *
 * Usage: TransactionalCopy --bootstrap HOST:PORT --input T --output T --group G
 *                          --transactional-id ID [--abort-every N] [--batch N]
 *                          [--idle-exit-s S] [--set key=value]...
 *
 * Runs until no record arrived for --idle-exit-s seconds (default: never), or until killed.
 * Prints one JSON line per event:
 *   {"event":"committed","records":N,"total":N} after each committed transaction;
 *   {"event":"aborted","records":N} after each deliberate abort;
 *   {"event":"fenced"} when another producer with the same id fenced this one (exit 0);
 *   {"event":"error","error":"Class: message"} and exit status 1 on another exception.
 */
public final class TransactionalCopy {
    private static final Duration POLL = Duration.ofMillis(200);

    public static void main(String[] argv) {
        Args args = Args.parse(argv);
        String input = args.get("input");
        String output = args.get("output");
        long abortEvery = args.getLong("abort-every", 0);
        int batch = (int) args.getLong("batch", 50);
        long idleExitNs = args.getLong("idle-exit-s", 0) * 1_000_000_000L;

        Properties consumerProps = new Properties();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        consumerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        consumerProps.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        consumerProps.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(batch));
        consumerProps.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        consumerProps.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        Properties producerProps = new Properties();
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        producerProps.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args.get("transactional-id"));
        producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        args.applySettings(producerProps);

        long transactions = 0;
        long total = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps)) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            long lastRecordNs = System.nanoTime();
            while (idleExitNs == 0 || System.nanoTime() - lastRecordNs < idleExitNs) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(POLL);
                if (records.isEmpty()) continue;
                lastRecordNs = System.nanoTime();
                transactions++;
                boolean abort = abortEvery > 0 && transactions % abortEvery == 0;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String value = new String(r.value(), StandardCharsets.UTF_8);
                    String copied = (abort ? "aborted:" : "copy:") + value;
                    producer.send(new ProducerRecord<>(output, r.key(),
                            copied.getBytes(StandardCharsets.UTF_8)));
                    positions.put(new TopicPartition(r.topic(), r.partition()),
                            new OffsetAndMetadata(r.offset() + 1));
                }
                if (abort) {
                    // The records reach the log first, so read_committed readers have
                    // something to skip.
                    producer.flush();
                    producer.abortTransaction();
                    rewind(consumer);
                    Json.emit(Json.obj("event", "aborted", "records", records.count()));
                    continue;
                }
                producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
                producer.commitTransaction();
                total += records.count();
                Json.emit(Json.obj("event", "committed", "records", records.count(), "total", total));
            }
        } catch (ProducerFencedException e) {
            Json.emit(Json.obj("event", "fenced"));
            return;
        } catch (Exception e) {
            Json.emit(Json.obj("event", "error", "error", Json.error(e)));
            System.exit(1);
        }
    }

    /** Seeks every assigned partition back to its committed offset (or the start). */
    private static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
        for (TopicPartition tp : consumer.assignment()) {
            OffsetAndMetadata at = committed.get(tp);
            if (at == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, at.offset());
            }
        }
    }
}
