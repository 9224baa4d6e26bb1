import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams word count, the application every Streams user starts from: lines from
 * an input topic are split into words, re-keyed by word (through a repartition topic),
 * counted in a state store backed by a compacted changelog topic, and every new count is
 * written to an output topic (key: the word, value: the count as an 8-byte long).
 *
 * Streams settings are the defaults (at-least-once, RocksDB stores, classic group
 * protocol) except the commit interval, shortened from 30 s so that counts appear within
 * the test's patience. Prints JSON lines: every state change ("state"), and "closed" once
 * closed; "error" if the application dies. Runs until its standard input closes, then
 * closes and leaves the group, so that a restart need not wait for the old member's
 * session to time out.
 *
 * Arguments: --bootstrap B --application-id A --state-dir D --input T --output T
 * [--set key=value ...]
 */
public final class WordCountApp {
    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("application-id"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, args.get("state-dir"));
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 500);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        args.applySettings(props);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> lines = builder.stream(args.get("input"));
        lines.flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .filter((key, word) -> !word.isEmpty())
                .map((key, word) -> KeyValue.pair(word, word))
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(args.get("output"), Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch dead = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            Json.emit(Json.obj("event", "state", "state", now.name(), "before", before.name()));
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                dead.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            Json.emit(Json.obj("event", "error", "error", Json.error(e)));
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();

        // Until the test closes our standard input (or the application dies).
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // discard
                }
            } catch (java.io.IOException e) {
                // closed
            }
            dead.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        dead.await();

        @SuppressWarnings("deprecation")
        KafkaStreams.CloseOptions close =
                new KafkaStreams.CloseOptions().leaveGroup(true).timeout(Duration.ofSeconds(60));
        boolean closed = streams.close(close);
        Json.emit(Json.obj("event", "closed", "clean", closed));
    }
}
