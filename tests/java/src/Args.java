import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * Command-line arguments of the check programs: `--name value` pairs, plus any number of
 * `--set key=value` client settings applied on top of the client's defaults, and bare words
 * (a subcommand).
 */
final class Args {
    private final Map<String, String> named = new HashMap<>();
    private final Map<String, String> settings = new LinkedHashMap<>();
    final List<String> words = new ArrayList<>();

    static Args parse(String[] argv) {
        Args a = new Args();
        for (int i = 0; i < argv.length; i++) {
            String arg = argv[i];
            if (!arg.startsWith("--")) {
                a.words.add(arg);
                continue;
            }
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException(arg + " needs a value");
            }
            String value = argv[++i];
            if (arg.equals("--set")) {
                int eq = value.indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("--set wants key=value, got " + value);
                }
                a.settings.put(value.substring(0, eq), value.substring(eq + 1));
            } else {
                a.named.put(arg.substring(2), value);
            }
        }
        return a;
    }

    String get(String name) {
        String v = named.get(name);
        if (v == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return v;
    }

    String get(String name, String fallback) {
        return named.getOrDefault(name, fallback);
    }

    long getLong(String name) {
        return Long.parseLong(get(name));
    }

    long getLong(String name, long fallback) {
        String v = named.get(name);
        return v == null ? fallback : Long.parseLong(v);
    }

    /** The --set settings, to apply after the program's own required settings. */
    void applySettings(Properties props) {
        props.putAll(settings);
    }

    Map<String, String> settings() {
        return settings;
    }
}
