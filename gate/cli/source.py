"""``gate check-source``: the preflight of a server before a channel uses it."""

from __future__ import annotations

import click

from gate.admin import channel as channels
from gate.admin.preflight import check_server, tls_report
from gate.cli.app import App, login_options, pass_app, report_checks, tls_options
from gate.common.tls import tls_settings

# --- preflight ---------------------------------------------------------------------------------


@click.command(name="check-source")
@click.argument("address", metavar="HOST:PORT")
@login_options("server", stored=False)
@tls_options("server")
@click.option("--server-id", type=int, help="the server_id gate would use; checked for clashes when given")
@click.option("--role", type=click.Choice(["source", "standby"]), default="source", show_default=True,
              help="standby also needs log_slave_updates")
@pass_app
def check_source(app: App, address: str, user: str | None, password: str | None, password_env: str | None,
                 tls_mode: str | None, tls_ca: str | None, tls_cert: str | None, tls_key: str | None,
                 server_id: int | None, role: str) -> None:
    """Check that a server is set up for gate.

    Checks log_bin ON, binlog_format ROW, binlog_row_image FULL, binlog_row_metadata FULL, that the
    user has REPLICATION SLAVE, BINLOG MONITOR (or REPLICATION CLIENT) and SELECT, and, with
    --server-id, that no other replica and not the server itself uses that server_id. Each problem
    names the statement or my.cnf line that fixes it. Also says whether the server offers TLS,
    which protocol and cipher gate negotiated and what it verified of the server's certificate
    (--tls-* as for a channel, default channel_defaults.tls). Exits with status 1 when a check fails.

    Example:

    \b
        export SOURCE_PASSWORD=...
        gate check-source db1.example.com:3306 --user gate --password-env SOURCE_PASSWORD --server-id 4242
        gate check-source db1.example.com:3306 --tls-mode verify-identity --tls-ca /etc/gate/ca.pem
    """
    tls = tls_settings(tls_mode, tls_ca, tls_cert, tls_key, keep=app.config.channel_defaults.tls)
    server = channels.server_login(address, user, password, password_env, role, tls=tls)
    report_checks(app, [{"role": role, "server": server.address, "server_id": server_id,
                   "problems": check_server(server, server_id, role), "tls": tls_report(server, role)}])
