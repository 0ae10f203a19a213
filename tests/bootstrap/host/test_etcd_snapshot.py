"""Host tier: the snapshot program's decisions (who uploads, names, etcd's config file, settings) and what
it leaves for Prometheus, checked by ``promtool check metrics``."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from modules.bootstrap.etcd_backup import ACCOUNT_URL_FACT
from modules.bootstrap.host import etcd_snapshot
from modules.bootstrap.host.boot import HOST_CONFIG
from modules.bootstrap.host.etcd_snapshot import BackupError, Outcome, Settings, due
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle
from modules.bootstrap.roles.prometheus import alert_rules
from tests.bootstrap.conftest import context, tool
from tests.bootstrap.host.loopback import serve

from .azurite import StorageImds, host_facts

HOUR = 3600


@pytest.mark.parametrize(
    ("age_s", "members", "expected"),
    [
        (None, 3, True),  # nothing in storage yet
        (0, 3, False),
        (20 * 60, 3, False),  # member 1, one offset after member 0's upload
        (40 * 60, 3, False),  # member 2
        (50 * 60 - 1, 3, False),  # half an offset early (timer jitter) still skips
        (50 * 60, 3, True),
        (60 * 60, 3, True),  # member 0 again, an interval on
        (80 * 60, 3, True),  # member 0 was down: member 1 takes over one offset later
        (54 * 60 - 1, 5, False),
        (54 * 60, 5, True),
    ],
)
def test_one_member_uploads_per_interval(age_s: int | None, members: int, expected: bool) -> None:
    now = 1_800_000_000.0
    latest = None if age_s is None else now - age_s
    assert due(latest, now, 60, members) is expected


def test_names_sort_by_time_across_members() -> None:
    s = _settings(Path("/x"))
    times = [1_800_000_000 + d for d in (7200, 0, 3600)]
    names = [
        etcd_snapshot.blob_name(s, m, t) for m, t in zip(("dev-etcd-2", "dev-etcd-0", "dev-etcd-1"), times, strict=True)
    ]
    assert names[1] == "dev/etcd/20270115T080000Z-dev-etcd-0.db"
    assert sorted(names) == [names[1], names[2], names[0]]
    assert [etcd_snapshot.taken_at(n) for n in sorted(names)] == sorted(times)
    assert etcd_snapshot.taken_at("dev/etcd/notes.txt") is None


def test_reads_etcds_own_config_file_rendered_or_rewritten(tmp_path: Path) -> None:
    ctx = context("dev")
    text = bundle(ctx, "etcd", "dev-etcd-1").file("etcd.conf.yml").content
    for form in (text, yaml.safe_dump(yaml.safe_load(text), default_style="'")):
        path = tmp_path / "etcd.conf.yml"
        path.write_text(form)
        conf = etcd_snapshot.etcd_config(str(path))
        assert conf["name"] == "dev-etcd-1" and conf["initial-cluster-token"] == ctx.etcd.token
        assert conf["initial-cluster"] == ctx.etcd.initial_cluster
        assert conf["advertise-client-urls"] == f"https://{ctx.etcd.members[1].ip}:2379"
    path.write_text("name: x\n")
    with pytest.raises(BackupError, match=r"no data-dir: is it the file etcd runs with \(--config-file\)\?"):
        etcd_snapshot.etcd_config(str(path))


def test_rendered_settings_load_and_name_files_the_member_has() -> None:
    ctx = context("prod-7500")
    node = bundle(ctx, "etcd", "prod-7500-etcd-3")
    raw = json.loads(node.file("etcd-backup.json").content)
    s = Settings(**raw)
    assert (s.cluster, s.etcd_role, s.members, s.container) == ("prod-7500", "etcd", 5, "etcd-backups")
    secrets = {f.path for f in node.secrets}
    assert {s.cacert, s.cert, s.key} <= secrets  # the health-check client certificate the member is given
    assert s.etcd_config in {f.path for f in node.files}
    # Where to upload comes from the bundle (a deploy-time fact), as whom from the host's facts: no VM tags.
    assert s.account_url is None and s.client_id is None
    assert [f.fact for f in node.facts if f.path == s.account_url_file] == [ACCOUNT_URL_FACT]
    assert s.host_config == HOST_CONFIG


def _settings(tmp_path: Path, **overrides: object) -> Settings:
    raw = json.loads(bundle(context("dev"), "etcd", "dev-etcd-0").file("etcd-backup.json").content)
    raw.update(textfile=str(tmp_path / "tf" / "agk_etcd_backup.prom"), spool=str(tmp_path / "spool"), **overrides)
    return Settings(**raw)


def test_a_member_without_its_facts_says_which_file_is_missing(tmp_path: Path) -> None:
    facts = host_facts(tmp_path / "facts", "https://acct.blob.core.windows.net", "cid")
    Path(facts["account_url_file"]).unlink()
    with pytest.raises(BackupError) as err:
        etcd_snapshot.storage(_settings(tmp_path, **facts))
    assert str(err.value) == (
        f"storage account URL ({facts['account_url_file']}): FileNotFoundError: [Errno 2] No such file or "
        f"directory: '{facts['account_url_file']}': the host sync writes it"
    )
    Path(facts["host_config"]).write_text("{}")
    Path(facts["account_url_file"]).write_text("https://acct.blob.core.windows.net\n")
    with pytest.raises(BackupError, match=r"^client id of the host's identity \(.*host\.json\): KeyError: 'client_id'"):
        etcd_snapshot.storage(_settings(tmp_path, **facts))


def test_the_container_is_the_one_the_bundle_names(tmp_path: Path) -> None:
    # (As whom: the Azurite tests' IMDS stand-in answers only the client id host.json names.)
    facts = host_facts(tmp_path / "facts", "https://acct.blob.core.windows.net", "cid-7")
    container = etcd_snapshot.storage(_settings(tmp_path, **facts))
    assert (container.account_url, container.container) == ("https://acct.blob.core.windows.net", "etcd-backups")


def _metrics(path: Path) -> dict[str, float]:
    return {
        m.group(1): float(m.group(2))
        for line in path.read_text().splitlines()
        if (m := re.match(r"^(agk_etcd_backup_\w+)\{[^}]*\} (\S+)$", line))
    }


@pytest.mark.realtool
def test_metrics_pass_promtool_and_a_failure_keeps_the_newest_snapshot_time(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    etcd_snapshot.write_metrics(
        s, "dev-etcd-0", 1_800_000_100.0, Outcome("dev/etcd/x.db", 1_800_000_000.0, 2_500_000, 1.5, 7, 606)
    )
    path = Path(s.textfile)
    check = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=path.read_text(), capture_output=True, text=True
    )
    assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check.stdout + check.stderr
    assert _metrics(path)["agk_etcd_backup_latest_snapshot_timestamp_seconds"] == 1_800_000_000.0
    etcd_snapshot.write_metrics(s, "dev-etcd-0", 1_800_003_700.0, None)
    after = _metrics(path)
    assert after["agk_etcd_backup_last_run_success"] == 0
    assert (
        after["agk_etcd_backup_latest_snapshot_timestamp_seconds"] == 1_800_000_000.0
    )  # the alert's age keeps growing
    assert after["agk_etcd_backup_last_upload_bytes"] == 2_500_000
    assert 'etcd_role="etcd",member="dev-etcd-0"' in path.read_text()
    assert [p.name for p in path.parent.iterdir()] == ["agk_etcd_backup.prom"]  # no temporary file left


def test_the_alert_rules_read_the_series_the_program_writes(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    etcd_snapshot.write_metrics(s, "dev-etcd-0", 1.0, Outcome("x", 1.0, 1, 1.0))
    written = set(_metrics(Path(s.textfile)))
    rules = yaml.safe_load(alert_rules(context("dev"))["etcd-backup.yml"])["groups"][0]["rules"]
    used = {name for r in rules for name in re.findall(r"agk_etcd_backup_\w+", r["expr"])}
    assert used and used <= written


def test_a_failed_run_exits_1_with_one_line_and_records_it(tmp_path: Path) -> None:
    conf = tmp_path / "etcd.conf.yml"
    conf.write_text(bundle(context("dev"), "etcd", "dev-etcd-0").file("etcd.conf.yml").content)
    fake = StorageImds("cid")
    with serve(fake) as url:
        s = _settings(tmp_path, imds=url, etcd_config=str(conf))
        path = tmp_path / "settings.json"
        path.write_text(json.dumps({k: v for k, v in s.__dict__.items()}))
        code = etcd_snapshot.main(["--config", str(path)])
    assert code == 1
    assert _metrics(Path(s.textfile))["agk_etcd_backup_last_run_success"] == 0
    assert etcd_snapshot.main(["--config", str(tmp_path / "absent.json")]) == 2


def test_a_save_refused_while_etcd_restarts_is_tried_again(tmp_path: Path) -> None:
    # A stand-in etcdctl: refused on the first call (its member restarting), the snapshot on the second.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "etcdctl").write_text(
        "#!/bin/sh\n"
        f'echo x >> "{calls}"\n'
        f'if [ "$(wc -l < "{calls}")" -lt 2 ]; then echo "connection refused" >&2; exit 1; fi\n'
        'for last; do :; done; echo snapshot > "$last"\n'
    )
    (bin_dir / "etcdctl").chmod(0o755)
    conf = {"advertise-client-urls": "https://10.0.0.1:2379"}
    waits: list[float] = []
    dest = tmp_path / "s.db"
    s = _settings(tmp_path, etcd_bin=str(bin_dir))
    etcd_snapshot.save(s, conf, str(dest), 60, sleep=waits.append)
    assert dest.read_text() == "snapshot\n" and waits == [etcd_snapshot.SAVE_RETRY_S]
    # Refused every time: the run fails after its tries, naming the endpoint and etcdctl's last line.
    calls.write_text("")
    (bin_dir / "etcdctl").write_text('#!/bin/sh\necho "connection refused" >&2\nexit 1\n')
    with pytest.raises(
        BackupError, match=r"^etcdctl snapshot save from https://10\.0\.0\.1:2379: exit 1: connection refused$"
    ):
        etcd_snapshot.save(s, conf, str(dest), 60, sleep=waits.append)
    assert len(waits) == etcd_snapshot.SAVE_TRIES


def test_etcds_programs_run_from_the_images_folder_not_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image's etcdctl and etcdutl (the table's release, PATHS.etcd_bin) are the ones run, even with another
    release first on PATH (an image may still carry Debian's 3.4 etcdctl in /usr/bin); none there: one line."""
    raw = json.loads(bundle(context("dev"), "etcd", "dev-etcd-0").file("etcd-backup.json").content)
    assert raw["etcd_bin"] == PATHS.etcd_bin
    image, other = tmp_path / "image", tmp_path / "other"
    for folder, says in ((image, "table"), (other, "other")):
        folder.mkdir()
        for name in ("etcdctl", "etcdutl"):
            (folder / name).write_text(
                f'#!/bin/sh\necho {says} >> "{tmp_path}/ran"\nfor last; do :; done; echo x > "$last"\n'
            )
            (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}:/usr/bin:/bin")
    s = _settings(tmp_path, etcd_bin=str(image))
    etcd_snapshot.save(s, {"advertise-client-urls": "https://10.0.0.1:2379"}, str(tmp_path / "s.db"), 60)
    assert (tmp_path / "ran").read_text() == "table\n"
    with pytest.raises(BackupError) as err:
        etcd_snapshot.snapshot_status(str(tmp_path / "empty"), str(tmp_path / "s.db"))
    assert str(err.value) == (
        f"{tmp_path}/empty/etcdutl is not installed: it ships with etcd in the node image (the versions table's etcd)"
    )
