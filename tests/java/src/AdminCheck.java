import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.Callable;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

/**
 * The Java AdminClient, default settings, one scenario per subcommand. Every step runs even
 * when an earlier one failed, and each reports its own result or error, so one run shows
 * every incompatibility.
 *
 * Usage: AdminCheck --bootstrap HOST:PORT SUBCOMMAND [--topic T] [--partitions N]
 *                   [--timestamp MS]
 *   topics             createTopics (3 partitions with configs, and one with broker
 *                      defaults), again (must fail), listTopics, describeTopics (also of a
 *                      missing topic), describeConfigs of the topic
 *   alter-config       incrementalAlterConfigs SET then DELETE retention.ms on --topic, each
 *                      followed by describeConfigs
 *   create-partitions  createPartitions of --topic to --partitions, describeTopics, then an
 *                      attempt to shrink it (must fail)
 *   delete             deleteTopics --topic, listTopics until it is gone, delete it again
 *                      (must fail)
 *   describe-cluster   describeCluster: cluster id, controller, nodes
 *   list-offsets       listOffsets of --partitions partitions of --topic: earliest, latest,
 *                      maxTimestamp and forTimestamp(--timestamp)
 *
 * Prints one JSON line: {"steps":[{"step":NAME,"ok":true,"result":...} or
 * {"step":NAME,"ok":false,"error":"Class: message"}, ...]}.
 */
public final class AdminCheck {
    private final Admin admin;
    private final Args args;
    private final List<Map<String, Object>> steps = new ArrayList<>();

    private AdminCheck(Admin admin, Args args) {
        this.admin = admin;
        this.args = args;
    }

    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        if (args.words.size() != 1) {
            throw new IllegalArgumentException("one subcommand expected, got " + args.words);
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        args.applySettings(props);
        try (Admin admin = Admin.create(props)) {
            AdminCheck check = new AdminCheck(admin, args);
            String command = args.words.get(0);
            switch (command) {
                case "topics": check.topics(); break;
                case "alter-config": check.alterConfig(); break;
                case "create-partitions": check.createPartitions(); break;
                case "delete": check.delete(); break;
                case "describe-cluster": check.describeCluster(); break;
                case "list-offsets": check.listOffsets(); break;
                default: throw new IllegalArgumentException("unknown subcommand " + command);
            }
            Json.emit(Json.obj("steps", check.steps));
        }
    }

    /** Runs one step and records its result, or its error without stopping the scenario. */
    private void step(String name, Callable<Object> body) {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("step", name);
        try {
            Object result = body.call();
            s.put("ok", true);
            s.put("result", result);
        } catch (Exception e) {
            s.put("ok", false);
            s.put("error", Json.error(e));
        }
        steps.add(s);
    }

    private void topics() {
        String prefix = args.get("topic");
        String a = prefix + "-a";
        String b = prefix + "-b";
        step("create", () -> {
            NewTopic withConfigs = new NewTopic(a, 3, (short) 1)
                    .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
            NewTopic withDefaults = new NewTopic(b, Optional.empty(), Optional.empty());
            CreateTopicsResult r = admin.createTopics(List.of(withConfigs, withDefaults));
            r.all().get();
            Map<String, Object> out = new TreeMap<>();
            for (String t : List.of(a, b)) {
                out.put(t, Json.obj("partitions", r.numPartitions(t).get(),
                        "replication_factor", r.replicationFactor(t).get()));
            }
            Config config = r.config(a).get();
            ConfigEntry retention = config.get("retention.ms");
            out.put("created_retention_ms", retention == null ? null : retention.value());
            return out;
        });
        step("create-existing", () -> {
            admin.createTopics(List.of(new NewTopic(a, 3, (short) 1))).all().get();
            return "created again";
        });
        step("list", () -> {
            Set<String> names = admin.listTopics().names().get();
            Set<String> all = admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get();
            return Json.obj("names", new TreeSet<>(names), "with_internal", new TreeSet<>(all));
        });
        step("describe", () -> {
            Map<String, TopicDescription> d = admin.describeTopics(List.of(a, b)).allTopicNames().get();
            Map<String, Object> out = new TreeMap<>();
            for (TopicDescription td : d.values()) {
                out.put(td.name(), describe(td));
            }
            return out;
        });
        step("describe-missing", () -> {
            admin.describeTopics(List.of(prefix + "-missing")).allTopicNames().get();
            return "described";
        });
        step("describe-configs", () -> topicConfig(a));
    }

    private void alterConfig() {
        String topic = args.get("topic");
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        step("set", () -> {
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("retention.ms", "1234567"),
                    AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
            return null;
        });
        step("describe-after-set", () -> topicConfig(topic));
        step("delete", () -> {
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("retention.ms", ""),
                    AlterConfigOp.OpType.DELETE);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
            return null;
        });
        step("describe-after-delete", () -> topicConfig(topic));
    }

    private void createPartitions() {
        String topic = args.get("topic");
        int partitions = Math.toIntExact(args.getLong("partitions"));
        step("increase", () -> {
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(partitions))).all().get();
            return null;
        });
        step("describe", () -> describe(
                admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)));
        step("decrease", () -> {
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(1))).all().get();
            return "decreased";
        });
    }

    private void delete() {
        String topic = args.get("topic");
        step("delete", () -> {
            admin.deleteTopics(List.of(topic)).all().get();
            return null;
        });
        step("list-until-gone", () -> {
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (true) {
                Set<String> names = admin.listTopics().names().get();
                if (!names.contains(topic)) return new TreeSet<>(names);
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(topic + " still listed 30 s after deleteTopics");
                }
                Thread.sleep(100);
            }
        });
        step("delete-missing", () -> {
            admin.deleteTopics(List.of(topic)).all().get();
            return "deleted again";
        });
    }

    private void describeCluster() {
        step("describe-cluster", () -> {
            DescribeClusterResult r = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node n : r.nodes().get()) nodes.add(node(n));
            return Json.obj("cluster_id", r.clusterId().get(), "controller", node(r.controller().get()),
                    "nodes", nodes);
        });
    }

    private void listOffsets() {
        String topic = args.get("topic");
        int partitions = Math.toIntExact(args.getLong("partitions"));
        long timestamp = args.getLong("timestamp");
        Map<String, OffsetSpec> specs = new LinkedHashMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("max-timestamp", OffsetSpec.maxTimestamp());
        specs.put("for-timestamp", OffsetSpec.forTimestamp(timestamp));
        for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
            step(spec.getKey(), () -> {
                Map<TopicPartition, OffsetSpec> request = new LinkedHashMap<>();
                for (int p = 0; p < partitions; p++) request.put(new TopicPartition(topic, p), spec.getValue());
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r =
                        admin.listOffsets(request).all().get();
                Map<String, Object> out = new TreeMap<>();
                for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : r.entrySet()) {
                    out.put(Integer.toString(e.getKey().partition()), Json.obj(
                            "offset", e.getValue().offset(), "timestamp", e.getValue().timestamp()));
                }
                return out;
            });
        }
    }

    private Map<String, Object> topicConfig(String topic) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        Map<String, Object> out = new TreeMap<>();
        for (ConfigEntry e : config.entries()) {
            out.put(e.name(), Json.obj("value", e.value(), "source", e.source().name(),
                    "default", e.isDefault()));
        }
        return out;
    }

    private static Map<String, Object> describe(TopicDescription td) {
        List<Object> parts = new ArrayList<>();
        for (TopicPartitionInfo p : td.partitions()) {
            parts.add(Json.obj("partition", p.partition(), "leader", node(p.leader()),
                    "replicas", ids(p.replicas()), "isr", ids(p.isr())));
        }
        return Json.obj("internal", td.isInternal(), "partitions", parts);
    }

    private static Object node(Node n) {
        return n == null ? null : Json.obj("id", n.id(), "host", n.host(), "port", n.port());
    }

    private static List<Integer> ids(Collection<Node> nodes) {
        List<Integer> out = new ArrayList<>();
        for (Node n : nodes) out.add(n.id());
        return out;
    }
}
