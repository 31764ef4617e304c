package gate.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system ({@code file:}) without the processes it starts when its native library is missing,
 * as it is in PySpark from PyPI: Hadoop then runs {@code chmod} for every file and directory it creates and
 * {@code readlink} for every link status it is asked for, about 3.5 ms each on a 2-core machine. A streaming
 * micro-batch writes its offset and commit logs with about 30 of them, a Delta image update with about 160.
 *
 * <p>Here permissions are set with {@link Files#setPosixFilePermissions} and a path that is no symbolic link gets
 * its status without asking {@code readlink}: the same permissions and statuses, in-process. A sticky bit, a
 * directory with its setuid or setgid bit (which chmod keeps and chmod(2) clears) and symbolic links keep Hadoop's
 * own code. Errors stay IOExceptions, but not the same ones: a missing file gives FileNotFoundException where
 * Hadoop's chmod gives ExitCodeException. spark_readers.session installs both classes for the {@code file:} scheme
 * in the sessions it starts with a local master ({@code fs.file.impl}, {@code fs.AbstractFileSystem.file.impl}).
 */
public final class LocalDisk {
    private LocalDisk() {
    }

    /** {@code fs.file.impl}: Hadoop's LocalFileSystem (checksums) over {@link Raw}. */
    public static final class FileSystem extends LocalFileSystem {
        public FileSystem() {
            super(new Raw());
        }
    }

    /** {@code fs.AbstractFileSystem.file.impl} (FileContext, used by streaming checkpoints): Hadoop's LocalFs
     * (checksums) over {@link Raw}. */
    public static final class Context extends ChecksumFs {
        public Context(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(new RawContext(conf));
        }
    }

    /** Hadoop's RawLocalFs over {@link Raw}. */
    static final class RawContext extends DelegateToFileSystem {
        RawContext(Configuration conf) throws IOException, URISyntaxException {
            super(URI.create("file:///"), new Raw(), conf, "file", false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;
        }

        @Override
        @SuppressWarnings("deprecation")
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;
        }
    }

    /** RawLocalFileSystem with in-process permissions and link statuses. */
    static final class Raw extends RawLocalFileSystem {
        private static final PosixFilePermission[] BITS = PosixFilePermission.values(); // OWNER_READ first: bit 8
        private static final int TYPE = 0170000; // the file type bits of a mode
        private static final int DIRECTORY = 0040000;
        private static final int SETID = 06000; // setuid and setgid

        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            if (permission.getStickyBit()) {
                super.setPermission(p, permission);
                return;
            }
            java.nio.file.Path file = pathToFile(p).toPath();
            try {
                int current = (Integer) Files.getAttribute(file, "unix:mode");
                if ((current & TYPE) == DIRECTORY && (current & SETID) != 0) {
                    super.setPermission(p, permission); // chmod keeps a directory's setuid and setgid; chmod(2) not
                    return;
                }
                int mode = permission.toShort();
                Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
                for (int i = 0; i < BITS.length; i++) {
                    if ((mode & (1 << (BITS.length - 1 - i))) != 0) {
                        set.add(BITS[i]);
                    }
                }
                Files.setPosixFilePermissions(file, set);
            } catch (NoSuchFileException e) {
                throw new FileNotFoundException("File " + p + " does not exist");
            }
        }

        /** Hadoop asks readlink about the path's string, and takes the path's own status when readlink finds no
         * link; a path that is no link is answered the same way without readlink. */
        @Override
        public FileStatus getFileLinkStatus(Path f) throws IOException {
            if (Files.isSymbolicLink(pathToFile(f).toPath())) {
                return super.getFileLinkStatus(f);
            }
            return getFileStatus(f);
        }
    }
}
