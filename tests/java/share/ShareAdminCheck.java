import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

/**
 * The Java Admin client's share group calls, one per run; prints one JSON line per result,
 * or an "error" line with the exception's class.
 *
 *   --bootstrap B --group G --op list-offsets
 *       one "offset" line per share-partition (topic, partition, start, lag or null)
 *   --bootstrap B --group G --op alter --topic T --partition P --offset N
 *   --bootstrap B --group G --op delete --topic T
 *   --bootstrap B --group G --op describe
 *       one "group" line (state, members, and each member's assigned partitions)
 *   --bootstrap B --op list-groups
 *       one "listed" line per share group
 *   --bootstrap B --group G --op set-config --key K --value V
 *   --bootstrap B --group G --op delete-config --key K
 *       incrementalAlterConfigs on the GROUP config resource; an "altered" line
 *   --bootstrap B --group G --op describe-config
 *       describeConfigs of the GROUP config resource: one "config" line per entry
 *       (name, value, source, read_only)
 *
 * Compiled against kafka-clients 4.x only.
 */
public final class ShareAdminCheck {
    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        Properties props = new Properties();
        props.put("bootstrap.servers", args.get("bootstrap"));
        String group = args.get("group", "");
        try (Admin admin = Admin.create(props)) {
            switch (args.get("op")) {
                case "list-offsets": {
                    Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin
                        .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                        .partitionsToOffsetInfo(group).get();
                    for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : offsets.entrySet()) {
                        long start = e.getValue() == null ? -1 : e.getValue().startOffset();
                        Long lag = e.getValue() == null ? null : e.getValue().lag().orElse(null);
                        Json.emit(Json.obj("event", "offset", "topic", e.getKey().topic(),
                            "partition", e.getKey().partition(), "start", start, "lag", lag));
                    }
                    break;
                }
                case "alter": {
                    TopicPartition tp = new TopicPartition(args.get("topic"),
                        (int) args.getLong("partition", 0));
                    admin.alterShareGroupOffsets(group, Map.of(tp, args.getLong("offset", 0)))
                        .all().get();
                    Json.emit(Json.obj("event", "altered"));
                    break;
                }
                case "delete": {
                    admin.deleteShareGroupOffsets(group, Collections.singleton(args.get("topic")))
                        .all().get();
                    Json.emit(Json.obj("event", "deleted"));
                    break;
                }
                case "describe": {
                    ShareGroupDescription d = admin.describeShareGroups(List.of(group))
                        .describedGroups().get(group).get();
                    List<Object> members = new ArrayList<>();
                    for (ShareMemberDescription m : d.members()) {
                        List<Object> assigned = new ArrayList<>();
                        for (TopicPartition tp : m.assignment().topicPartitions()) {
                            assigned.add(tp.topic() + "-" + tp.partition());
                        }
                        members.add(Json.obj("client", m.clientId(), "assigned", assigned));
                    }
                    Json.emit(Json.obj("event", "group", "state", d.groupState().toString(),
                        "members", members));
                    break;
                }
                case "list-groups": {
                    for (GroupListing g : admin.listGroups(ListGroupsOptions.forShareGroups())
                            .all().get()) {
                        Json.emit(Json.obj("event", "listed", "group", g.groupId(),
                            "type", g.type().map(Object::toString).orElse("")));
                    }
                    break;
                }
                case "set-config":
                case "delete-config": {
                    ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
                    boolean set = args.get("op").equals("set-config");
                    ConfigEntry entry = new ConfigEntry(args.get("key"),
                        set ? args.get("value") : null);
                    AlterConfigOp op = new AlterConfigOp(entry,
                        set ? AlterConfigOp.OpType.SET : AlterConfigOp.OpType.DELETE);
                    admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
                    Json.emit(Json.obj("event", "altered"));
                    break;
                }
                case "describe-config": {
                    ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
                    Config config = admin.describeConfigs(List.of(resource)).all().get()
                        .get(resource);
                    for (ConfigEntry e : config.entries()) {
                        Json.emit(Json.obj("event", "config", "name", e.name(), "value", e.value(),
                            "source", e.source().toString(), "read_only", e.isReadOnly()));
                    }
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown --op");
            }
        } catch (ExecutionException e) {
            Json.emit(Json.obj("event", "error", "error", e.getCause().getClass().getSimpleName(),
                "message", String.valueOf(e.getCause().getMessage())));
        }
    }
}
