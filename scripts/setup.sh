#!/usr/bin/env bash
# Set up everything gate needs on Debian 12: system packages (MariaDB server and client, the MariaDB
# JDBC driver, a Java runtime and compiler, python3-venv, make, prometheus for promtool) when missing, the virtual
# environment .venv with gate installed, the Delta Lake jars (Maven Central) in a local cache, and the jar of the
# JVM format("gate") built next to them.
# Safe to run again: it installs only what is missing and reinstalls Python packages only when
# pyproject.toml has changed.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-client)
dpkg -s libmariadb-java >/dev/null 2>&1 || missing+=(libmariadb-java)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)  # builds the JVM format("gate") (below)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)  # promtool: the tests check the alert rules with it

if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    # No init system here (containers, CI): a package's maintainer script that tries to start its service
    # (mariadb, prometheus) must not fail the install. policy-rc.d answering 101 tells invoke-rc.d "do not
    # start"; it is removed on exit if this script put it there. Tests and the demo start their own servers.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
        $sudo chmod 755 "$policy"
        trap '$sudo rm -f "$policy"' EXIT
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    python3 -m venv .venv
fi

stamp=.venv/.gate-installed
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    echo "setup: installing Python packages into .venv"
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[test]'
    echo "$wanted" > "$stamp"
fi

# The benchmark's peers (scripts/bench/peers/: Debezium and Maxwell, compared with gate by
# scripts/bench/benchmark.py): their published Java artifacts, resolved once from Maven Central into
# ~/.m2 so that the benchmark builds them offline (mvn -o). Needs Maven and a JDK (javac). The tests do not
# need the peers: a failure here is reported and setup goes on; the benchmark then says what is missing.
peers_stamp=.venv/.gate-peers-resolved
peers_wanted="$(cat scripts/bench/peers/*/pom.xml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$peers_stamp" 2>/dev/null)" != "$peers_wanted" ]; then
    peer_missing=()
    command -v mvn >/dev/null 2>&1 || peer_missing+=(maven)
    command -v javac >/dev/null 2>&1 || peer_missing+=(default-jdk-headless)
    if [ ${#peer_missing[@]} -gt 0 ]; then
        echo "setup: installing ${peer_missing[*]} (the benchmark's peers)"
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
            --no-install-recommends "${peer_missing[@]}" >/dev/null; } || echo "setup: could not install ${peer_missing[*]}; the benchmark's peers will be missing"
    fi
    peers_ok=1
    for pom in scripts/bench/peers/*/pom.xml; do
        peer="$(basename "$(dirname "$pom")")"
        echo "setup: fetching the benchmark peer $peer's artifacts into ~/.m2"
        if ! mvn -q -B -f "$pom" dependency:resolve >"/tmp/gate-setup-peer-$peer.log" 2>&1; then
            echo "setup: WARNING: could not fetch $peer's artifacts from Maven Central (see" \
                 "/tmp/gate-setup-peer-$peer.log); gate and its tests do not need them, the benchmark" \
                 "runs without that peer (or pass --peers none)"
            peers_ok=0
        fi
    done
    [ "$peers_ok" -eq 0 ] || echo "$peers_wanted" > "$peers_stamp"
fi

# Delta Lake's jars (the table images of gate spark-materialise): fetched once from Maven Central into
# ~/.cache/gate/jars (or $GATE_JARS); Spark sessions take them from there, so demo and tests need no network.
if ! .venv/bin/python -m spark_readers.delta_jars >/dev/null; then
    echo "setup: could not fetch the Delta Lake jars from Maven Central (see the error above); the table images" \
         "need them: run scripts/setup.sh again once Maven Central is reachable" >&2
    exit 1
fi

# The JVM format("gate") (spark_readers/jvm): compiled once with javac against PySpark's own jars (no network)
# into the same cache; Spark sessions put it on the classpath. Built again only when its sources change.
if ! .venv/bin/python -m spark_readers.jvm_source >/dev/null; then
    echo "setup: could not build the jar of the JVM format(\"gate\") (see the error above); Spark sessions" \
         "need it: fix the JDK (javac 17 or newer) and run scripts/setup.sh again" >&2
    exit 1
fi
