import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * The Java AdminClient's security calls (SCRAM users and ACLs), default settings plus the
 * --set ones (the connection's security). Every step runs even when an earlier one failed,
 * and each reports its own result or error.
 *
 * Usage: SecurityAdminCheck --bootstrap HOST:PORT SUBCOMMAND [--user U] [--password P]
 *                           [--mechanism M] [--iterations N] [--principal P] [--topic T]
 *                           [--group G] [--set key=value ...]
 *   scram-add       alterUserScramCredentials: an upsertion of --user with --password,
 *                   --mechanism (SCRAM-SHA-256 or SCRAM-SHA-512) and --iterations
 *   scram-describe  describeUserScramCredentials of every user ("all"), and of --user
 *                   ("user")
 *   scram-delete    alterUserScramCredentials: the deletion of --user's --mechanism
 *   acls            createAcls (Read on --topic and on --group for --principal),
 *                   describeAcls with a filter (--topic's literal ACLs), deleteAcls with
 *                   that filter, describeAcls of everything
 *
 * Prints one JSON line: {"steps":[{"step":NAME,"ok":true,"result":...} or
 * {"step":NAME,"ok":false,"error":"Class: message"}, ...]}.
 */
public final class SecurityAdminCheck {
    private final Admin admin;
    private final Args args;
    private final List<Map<String, Object>> steps = new ArrayList<>();

    private SecurityAdminCheck(Admin admin, Args args) {
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
            SecurityAdminCheck check = new SecurityAdminCheck(admin, args);
            String command = args.words.get(0);
            switch (command) {
                case "scram-add": check.scramAdd(); break;
                case "scram-describe": check.scramDescribe(); break;
                case "scram-delete": check.scramDelete(); break;
                case "acls": check.acls(); break;
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

    private ScramMechanism mechanism() {
        return ScramMechanism.fromMechanismName(args.get("mechanism"));
    }

    private void alter(UserScramCredentialAlteration alteration) throws Exception {
        admin.alterUserScramCredentials(List.of(alteration)).all().get();
    }

    private void scramAdd() {
        step("upsert", () -> {
            ScramCredentialInfo info = new ScramCredentialInfo(mechanism(),
                    Math.toIntExact(args.getLong("iterations")));
            alter(new UserScramCredentialUpsertion(args.get("user"), info, args.get("password")));
            return null;
        });
    }

    private void scramDelete() {
        step("delete", () -> {
            alter(new UserScramCredentialDeletion(args.get("user"), mechanism()));
            return null;
        });
    }

    private static List<Object> credentials(UserScramCredentialsDescription d) {
        List<Object> out = new ArrayList<>();
        for (ScramCredentialInfo info : d.credentialInfos()) {
            out.add(Json.obj("mechanism", info.mechanism().mechanismName(),
                    "iterations", info.iterations()));
        }
        return out;
    }

    private void scramDescribe() {
        step("all", () -> {
            Map<String, UserScramCredentialsDescription> all =
                    admin.describeUserScramCredentials().all().get();
            Map<String, Object> out = new TreeMap<>();
            for (UserScramCredentialsDescription d : all.values()) {
                out.put(d.name(), credentials(d));
            }
            return out;
        });
        step("user", () -> {
            String user = args.get("user");
            return credentials(admin.describeUserScramCredentials(List.of(user))
                    .description(user).get());
        });
    }

    private static Map<String, Object> describe(AclBinding b) {
        return Json.obj("resource_type", b.pattern().resourceType().name(),
                "name", b.pattern().name(),
                "pattern_type", b.pattern().patternType().name(),
                "principal", b.entry().principal(),
                "host", b.entry().host(),
                "operation", b.entry().operation().name(),
                "permission", b.entry().permissionType().name());
    }

    private static List<Object> describe(Collection<AclBinding> bindings) {
        List<Object> out = new ArrayList<>();
        for (AclBinding b : bindings) {
            out.add(describe(b));
        }
        return out;
    }

    private void acls() {
        String principal = args.get("principal");
        AccessControlEntry read = new AccessControlEntry(principal, "*", AclOperation.READ,
                AclPermissionType.ALLOW);
        ResourcePattern topic = new ResourcePattern(ResourceType.TOPIC, args.get("topic"),
                PatternType.LITERAL);
        ResourcePattern group = new ResourcePattern(ResourceType.GROUP, args.get("group"),
                PatternType.LITERAL);
        AclBindingFilter topicFilter = new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, args.get("topic"),
                        PatternType.LITERAL),
                AccessControlEntryFilter.ANY);
        step("create", () -> {
            admin.createAcls(List.of(new AclBinding(topic, read), new AclBinding(group, read)))
                    .all().get();
            return null;
        });
        step("describe-topic", () -> describe(admin.describeAcls(topicFilter).values().get()));
        step("delete-topic", () -> describe(admin.deleteAcls(List.of(topicFilter)).all().get()));
        step("describe-all", () -> describe(admin.describeAcls(AclBindingFilter.ANY).values().get()));
    }
}
