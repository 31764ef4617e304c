package jdk.nashorn.api.scripting;

/**
 * An empty stand-in for the Nashorn class of this name, which Java 15 removed. Maxwell 1.22.6 (the newest
 * version on Maven Central) tests every column value with {@code instanceof ScriptObjectMirror} before
 * writing it to JSON, to support its JavaScript filters; the benchmark runs no JavaScript filter, so no
 * value is ever one and the test only needs the class to exist on Java 17.
 */
public final class ScriptObjectMirror {
    private ScriptObjectMirror() {
    }
}
