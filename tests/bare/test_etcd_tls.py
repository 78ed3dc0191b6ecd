"""etcd with TLS client certificates is the only control plane: without a certificate of its CA, nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.bare.etcd_store import EtcdError, Store, Tls
from lamplighter.bare.keys import Keys
from lamplighter.lab.etcd_cluster import EtcdCluster
from lamplighter.lab.etcd_tls import make_pki

pytestmark = pytest.mark.integration


def test_only_clients_with_a_certificate_of_the_clusters_ca_get_in(tmp_path: Path) -> None:
    with EtcdCluster(tmp_path / "etcd", size=1, tls=True) as etcd:
        assert etcd.pki is not None and etcd.endpoints[0].startswith("https://")
        keys = Keys("tls")
        host = Store(etcd.endpoints, timeout_s=2.0, tls=etcd.pki.client("h1"))
        host.put(keys.host("h1"), "{}")
        entry = host.get(keys.host("h1"))
        assert entry is not None and entry.value == "{}"

        # Trusts etcd's server certificate, but its own was signed by another CA.
        stranger = make_pki(tmp_path / "other", ca_name="someone-else").client("h1")
        intruder = Store(etcd.endpoints, timeout_s=2.0, tls=Tls(str(etcd.pki.ca), stranger.cert, stranger.key))
        with pytest.raises(EtcdError):
            intruder.put(keys.host("h1"), "taken over")
        entry = host.get(keys.host("h1"))
        assert entry is not None and entry.value == "{}"  # nothing changed

        with pytest.raises(ValueError, match="give the client certificate"):
            Store(etcd.endpoints)
