import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * The suite's test record format, the same as make_record() in tests/python/support.py, so
 * that records written by Python clients can be checked here byte for byte and the other way
 * round. A record is derived from its sequence number alone:
 *
 *   key     "key-%08d" % seq
 *   value   "seq=%010d;" % seq, then 80 bytes (seq * 31 + j * 7) % 256 for j in 0..79
 *   headers ("seq", decimal seq), ("bin", [seq % 256, 0x00, 0xFF, (seq >> 8) % 256]),
 *           ("dup", "a"), ("dup", "b"), ("empty", "")
 *
 * Sized test records (sized_record() in tests/python/support.py), for tests that need
 * records of a given size, half compressible: key "key-%08d" % seq, one header ("seq",
 * decimal seq), and a value of exactly B bytes: "seq=%010d;" % seq, then B - 15 filler
 * bytes, the first (B - 15) / 2 of them pseudo-random (see sizedValue), the rest
 * (seq * 31 + j * 7) % 256 for filler byte j.
 */
final class TestRecords {
    static final int VALUE_FILLER_BYTES = 80;
    private static final int VALUE_PREFIX_BYTES = 15; // "seq=" + 10 digits + ";"

    private TestRecords() {}

    static byte[] key(long seq) {
        return String.format("key-%08d", seq).getBytes(StandardCharsets.US_ASCII);
    }

    static byte[] value(long seq) {
        byte[] prefix = String.format("seq=%010d;", seq).getBytes(StandardCharsets.US_ASCII);
        byte[] value = Arrays.copyOf(prefix, VALUE_PREFIX_BYTES + VALUE_FILLER_BYTES);
        for (int j = 0; j < VALUE_FILLER_BYTES; j++) {
            value[VALUE_PREFIX_BYTES + j] = (byte) ((seq * 31 + j * 7) % 256);
        }
        return value;
    }

    static List<Header> headers(long seq) {
        List<Header> headers = new ArrayList<>();
        headers.add(new RecordHeader("seq", Long.toString(seq).getBytes(StandardCharsets.US_ASCII)));
        headers.add(new RecordHeader("bin",
                new byte[] {(byte) (seq % 256), 0x00, (byte) 0xFF, (byte) ((seq >> 8) % 256)}));
        headers.add(new RecordHeader("dup", new byte[] {'a'}));
        headers.add(new RecordHeader("dup", new byte[] {'b'}));
        headers.add(new RecordHeader("empty", new byte[0]));
        return headers;
    }

    /**
     * The value of sized test record `seq`, `size` bytes (at least 15). The pseudo-random
     * filler bytes come from a 32-bit linear congruential generator:
     * x = seq * 2654435761 + 1, then for each byte x = x * 1103515245 + 12345 (both mod
     * 2^32) and the byte is (x >> 16) & 0xFF.
     */
    static byte[] sizedValue(long seq, int size) {
        byte[] prefix = String.format("seq=%010d;", seq).getBytes(StandardCharsets.US_ASCII);
        if (size < VALUE_PREFIX_BYTES) {
            throw new IllegalArgumentException("a sized value has at least 15 bytes");
        }
        byte[] value = Arrays.copyOf(prefix, size);
        int filler = size - VALUE_PREFIX_BYTES;
        int random = filler / 2;
        long x = (seq * 2654435761L + 1) & 0xFFFFFFFFL;
        for (int j = 0; j < filler; j++) {
            if (j < random) {
                x = (x * 1103515245L + 12345) & 0xFFFFFFFFL;
                value[VALUE_PREFIX_BYTES + j] = (byte) (x >>> 16);
            } else {
                value[VALUE_PREFIX_BYTES + j] = (byte) ((seq * 31 + j * 7) % 256);
            }
        }
        return value;
    }

    static List<Header> sizedHeaders(long seq) {
        return List.of(new RecordHeader("seq", Long.toString(seq).getBytes(StandardCharsets.US_ASCII)));
    }

    /** The sequence number of a test record value; IllegalArgumentException if malformed. */
    static long seqOf(byte[] value) {
        if (value == null) {
            throw new IllegalArgumentException("not a test record value: null");
        }
        if (value.length < VALUE_PREFIX_BYTES || value[14] != ';'
                || !new String(value, 0, 4, StandardCharsets.US_ASCII).equals("seq=")) {
            String head = new String(value, 0, Math.min(value.length, 40), StandardCharsets.ISO_8859_1);
            throw new IllegalArgumentException("not a test record value: " + head);
        }
        return Long.parseLong(new String(value, 4, 10, StandardCharsets.US_ASCII));
    }

    /** Null when the record is exactly test record `seq`, else what differs. */
    static String problem(ConsumerRecord<byte[], byte[]> r, long seq) {
        String where = "partition " + r.partition() + " offset " + r.offset() + " seq " + seq + ": ";
        if (!Arrays.equals(r.key(), key(seq))) {
            return where + "key differs";
        }
        if (!Arrays.equals(r.value(), value(seq))) {
            return where + "value differs";
        }
        Header[] got = r.headers().toArray();
        List<Header> want = headers(seq);
        if (got.length != want.size()) {
            return where + got.length + " headers, want " + want.size();
        }
        for (int i = 0; i < got.length; i++) {
            Header g = got[i];
            Header w = want.get(i);
            byte[] gv = g.value();
            if (!g.key().equals(w.key()) || !Arrays.equals(gv, w.value())) {
                return where + "header " + i + " is " + g.key() + "=" + Arrays.toString(gv)
                        + ", want " + w.key() + "=" + Arrays.toString(w.value());
            }
        }
        return null;
    }
}
