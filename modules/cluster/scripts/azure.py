"""A minimal Azure Resource Manager client for scale-set instances (stdlib only, runs in the cluster).

Credentials: a managed identity's token from the instance metadata service (IMDS) of the node the
pod runs on, ``GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=<ARM>/&client_id=<id>``
with ``Metadata: true`` (learn.microsoft.com, "How to use managed identities for Azure resources on an
Azure VM to acquire an access token"; ``client_id`` picks one of several user-assigned identities).
Long-running operations answer 202; this client then reads the resource itself until it shows the
result (the instance gone, the capacity set), waiting ``Retry-After`` seconds between reads. It does not
follow ``Azure-AsyncOperation``: that URL is ``/subscriptions/<sub>/providers/Microsoft.Compute/locations/
<region>/operations/<id>``, a subscription-scope read (``Microsoft.Compute/locations/operations/read``) that
a role assigned on one scale set does not grant, so the poll would fail with AuthorizationFailed.

Every call it makes is a row of :data:`ARM_CALLS`, with the action Azure checks for it, all on the scale
set: the remediation identity's custom role is exactly those actions (modules/azure/identities.py).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Delete Instances and Update exist in this version (learn.microsoft.com/rest/api/compute, 2024-07-01).
API_VERSION = "2024-07-01"
IMDS_API_VERSION = "2018-02-01"
# Uniform scale-set nodes (cloud-provider-azure pkg/provider/azure_vmss.go, vmssVMProviderIDRE):
# azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachineScaleSets/<vmss>/virtualMachines/<id>
_PROVIDER_ID = re.compile(
    r"^azure:///subscriptions/(?P<subscription>[^/]+)/resourceGroups/(?P<group>[^/]+)/providers/"
    r"Microsoft\.Compute/virtualMachineScaleSets/(?P<vmss>[^/]+)/virtualMachines/(?P<instance>\d+)$",
    re.IGNORECASE,  # Azure may spell resourcegroups in lower case
)


@dataclass(frozen=True)
class ArmCall:
    method: str
    path: str
    """Below the scale set's id (``""``: the set itself)."""
    action: str
    """The Azure RBAC action the call needs (resource-provider operations for Microsoft.Compute)."""


ARM_CALLS = (
    ArmCall("GET", "", "Microsoft.Compute/virtualMachineScaleSets/read"),
    ArmCall("GET", "virtualMachines/{instance}", "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read"),
    ArmCall("GET", "virtualMachines", "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read"),
    ArmCall("POST", "delete", "Microsoft.Compute/virtualMachineScaleSets/delete/action"),
    ArmCall("PATCH", "", "Microsoft.Compute/virtualMachineScaleSets/write"),
    ArmCall("POST", "manualupgrade", "Microsoft.Compute/virtualMachineScaleSets/manualUpgrade/action"),
    ArmCall("POST", "reimage", "Microsoft.Compute/virtualMachineScaleSets/reimage/action"),
)
"""Every ARM call :class:`Arm` makes: Get (the set, an instance), List VMs, Delete Instances, Update, and
for the pool roll Update Instances (one instance to the set's latest model) and Reimage (one whose update
did not restart it)."""


class AzureError(Exception):
    """An ARM or IMDS call failed; the message says which and why."""


@dataclass(frozen=True)
class Instance:
    subscription: str
    group: str
    vmss: str
    instance: str

    @property
    def scale_set_path(self) -> str:
        return (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.vmss}"
        )


def instance_of(provider_id: str) -> Instance | None:
    """The scale-set instance a node's ``spec.providerID`` names (None: not a Uniform scale-set VM)."""
    m = _PROVIDER_ID.match(provider_id or "")
    if m is None:
        return None
    return Instance(m["subscription"], m["group"], m["vmss"], m["instance"])


class Arm:
    def __init__(
        self,
        *,
        client_id: str,
        arm_endpoint: str = "https://management.azure.com",
        imds_endpoint: str = "http://169.254.169.254",
        api_version: str = API_VERSION,
        poll_timeout: float = 60,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client_id, self.api_version = client_id, api_version
        self.arm, self.imds = arm_endpoint.rstrip("/"), imds_endpoint.rstrip("/")
        self.poll_timeout, self.sleep = poll_timeout, sleep
        self._token: tuple[str, float] | None = None

    def token(self) -> str:
        if self._token and self._token[1] - 300 > time.time():
            return self._token[0]
        query = urllib.parse.urlencode(
            {"api-version": IMDS_API_VERSION, "resource": f"{self.arm}/", "client_id": self.client_id}
        )
        req = urllib.request.Request(f"{self.imds}/metadata/identity/oauth2/token?{query}")
        req.add_header("Metadata", "true")
        for attempt in range(3):
            try:
                # IMDS is link-local and never proxied.
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(req, timeout=30) as resp:
                    body = json.loads(resp.read())
                break
            except urllib.error.HTTPError as err:
                # IMDS asks for retries on throttling and transient errors (20 requests/s per VM).
                if err.code in (429, 500, 503) and attempt < 2:
                    self.sleep(2**attempt)
                    continue
                raise AzureError(f"IMDS token for client_id {self.client_id}: HTTP {err.code} {err.reason}") from None
        self._token = (body["access_token"], float(body.get("expires_on") or time.time() + 600))
        return self._token[0]

    def _call(self, method: str, url: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
        if url.startswith("/"):
            sep = "&" if "?" in url else "?"
            url = f"{self.arm}{url}{sep}api-version={self.api_version}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token()}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw = resp.read()
                return resp.status, dict(resp.headers.items()), json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                detail = json.loads(raw).get("error", {}).get("message") or raw.decode(errors="replace")
            except ValueError:
                detail = raw.decode(errors="replace")
            if err.code == 404:
                return 404, dict(err.headers.items()), None
            raise AzureError(f"{method} {url.split('?')[0]}: HTTP {err.code}: {detail[:300]}") from None

    def _wait(self, what: str, status: int, headers: dict[str, str], done: Callable[[], bool]) -> bool:
        """After a 201/202, read the resource until ``done()``; False if still running after poll_timeout.

        Deleting a GPU VM takes minutes; the caller (a CronJob run) leaves an unfinished operation
        to the next run instead of blocking the fencing of other nodes.
        """
        if status not in (201, 202):
            return True
        lower = {k.lower(): v for k, v in headers.items()}
        deadline = time.monotonic() + self.poll_timeout
        retry = float(lower.get("retry-after") or 10)
        while time.monotonic() < deadline:
            self.sleep(retry)
            if done():
                return True
        return False

    def instance_state(self, vm: Instance) -> str | None:
        """The instance's provisioningState (``Succeeded``, ``Deleting``, ...); None once it is gone."""
        props = self.instance(vm)
        return None if props is None else str(props.get("provisioningState", "Unknown"))

    def instance(self, vm: Instance) -> dict[str, Any] | None:
        """The instance's properties (``provisioningState``, ``latestModelApplied``); None once it is gone."""
        code, _, body = self._call("GET", f"{vm.scale_set_path}/virtualMachines/{vm.instance}")
        if code == 404:
            return None
        props: dict[str, Any] = (body or {}).get("properties") or {}
        return props

    def outdated(self, vm: Instance) -> set[str]:
        """Instance ids of ``vm``'s scale set that do not run the set's latest model (Virtual Machine Scale Set
        VMs - List with ``$filter=properties/latestModelApplied eq false``, one of the filters the API
        allows), following ``nextLink`` page by page."""
        query = urllib.parse.urlencode({"$filter": "properties/latestModelApplied eq false"})
        url: str | None = f"{vm.scale_set_path}/virtualMachines?{query}"
        found: set[str] = set()
        while url:
            code, _, body = self._call("GET", url)
            if code == 404:
                raise AzureError(f"scale set {vm.vmss} in {vm.group} does not exist")
            for item in (body or {}).get("value") or []:
                if not (item.get("properties") or {}).get("latestModelApplied", True):
                    found.add(str(item["instanceId"]))
            url = (body or {}).get("nextLink")  # absolute, with its own api-version and skip token
        return found

    def update_instance(self, vm: Instance) -> None:
        """POST .../manualupgrade {"instanceIds": [id]} (Update Instances): the instance takes the set's latest
        model; a new image reference reimages its OS disk. Not waited for: the roll reads the node's return."""
        self._call("POST", f"{vm.scale_set_path}/manualupgrade", {"instanceIds": [vm.instance]})

    def reimage_instance(self, vm: Instance) -> None:
        """POST .../reimage {"instanceIds": [id]} (Virtual Machine Scale Sets - Reimage): the OS disk from the
        model's image again, so the instance boots afresh. Not waited for, as Update Instances."""
        self._call("POST", f"{vm.scale_set_path}/reimage", {"instanceIds": [vm.instance]})

    def scale_set(self, vm: Instance) -> dict[str, Any]:
        code, _, body = self._call("GET", vm.scale_set_path)
        if code == 404:
            raise AzureError(f"scale set {vm.vmss} in {vm.group} does not exist")
        result: dict[str, Any] = body
        return result

    def delete_instance(self, vm: Instance) -> bool:
        """POST .../virtualMachineScaleSets/<vmss>/delete {"instanceIds": [id]} (Delete Instances); True once done."""
        code, headers, _ = self._call("POST", f"{vm.scale_set_path}/delete", {"instanceIds": [vm.instance]})

        def gone() -> bool:
            state = self.instance_state(vm)
            if state == "Failed":
                raise AzureError(f"deleting {vm.vmss} instance {vm.instance}: the instance is in state Failed")
            return state is None

        return self._wait(f"deleting {vm.vmss} instance {vm.instance}", code, headers, gone)

    def set_capacity(self, vm: Instance, sku: dict[str, Any], capacity: int) -> bool:
        """PATCH the scale set's sku.capacity (Virtual Machine Scale Sets - Update); True once done."""
        body = {"sku": {**{k: v for k, v in sku.items() if k in ("name", "tier")}, "capacity": capacity}}
        code, headers, _ = self._call("PATCH", vm.scale_set_path, body)

        def set_() -> bool:
            found = self.scale_set(vm)
            state = (found.get("properties") or {}).get("provisioningState", "Succeeded")
            if state == "Failed":
                raise AzureError(f"setting {vm.vmss} capacity to {capacity}: the scale set is in state Failed")
            return bool(state == "Succeeded" and (found.get("sku") or {}).get("capacity") == capacity)

        return self._wait(f"setting {vm.vmss} capacity to {capacity}", code, headers, set_)
