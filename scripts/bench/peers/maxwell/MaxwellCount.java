import com.zendesk.maxwell.Maxwell;
import java.io.PrintStream;

/**
 * The benchmark's Maxwell peer: Maxwell with its stdout producer, whose output is counted here instead
 * of being written anywhere.
 *
 * <p>Arguments: ROWS, then Maxwell's own options (the benchmark passes --producer=stdout and
 * --init_position=FILE:POS:0, among others). Maxwell's stdout producer prints one JSON line per row
 * change with System.out.println; this main replaces System.out by a stream that counts those lines (a
 * line starting with "{") and passes any other text to stderr. It prints "started T" to the real stdout
 * before Maxwell starts, "rows N T" at every tenth of ROWS, and exits when ROWS rows were counted
 * (T: seconds since the epoch).
 */
public final class MaxwellCount {
    private MaxwellCount() {
    }

    private static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    /** System.out for Maxwell: counts the producer's row lines and ends the process at the last one. */
    private static final class Counter extends PrintStream {
        private final PrintStream report;
        private final long rows;
        private final long step;
        private long counted;

        Counter(PrintStream report, long rows) {
            super(System.err, true);
            this.report = report;
            this.rows = rows;
            this.step = Math.max(1, rows / 10);
        }

        @Override
        public synchronized void println(String line) {
            if (line == null || !line.startsWith("{")) {
                super.println(line);
                return;
            }
            counted++;
            if (counted % step == 0 || counted == rows) {
                report.println("rows " + counted + " " + now());
                report.flush();
            }
            if (counted >= rows) {
                Runtime.getRuntime().halt(0);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: MaxwellCount ROWS MAXWELL_OPTION...");
            System.exit(2);
        }
        PrintStream stdout = System.out;
        System.setOut(new Counter(stdout, Long.parseLong(args[0])));
        String[] options = new String[args.length - 1];
        System.arraycopy(args, 1, options, 0, options.length);
        stdout.println("started " + now());
        stdout.flush();
        Maxwell.main(options);
    }
}
