"""VM list prices for the cost line of a plan, read from what Azure's Retail Prices API returns.

Prices change and differ per region, so none is typed into this repository: the review workflow
fetches them for the sizes and regions the stacks use (``GET https://prices.azure.com/api/retail/prices``
with ``$filter=serviceName eq 'Virtual Machines' and armRegionName eq '<region>'``; unauthenticated,
USD, paged by ``NextPageLink``: https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices)
and `agk plan --prices FILE` reads the saved answers. A file holds one answer (``{"Items": [...]}``) or a
list of them (one per page or region).

The price taken for a VM size is the Linux pay-as-you-go meter: ``type`` ``Consumption``, ``unitOfMeasure``
``1 Hour``, and neither a Windows product nor a Spot or Low Priority SKU (the API lists all of these
for one ``armSkuName``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modules.errors import AgkError

HOURS_PER_MONTH = 730
"""Azure's pricing calculator prices a month as 730 hours."""
_NOT_LINUX_ON_DEMAND = ("Spot", "Low Priority")


@dataclass(frozen=True)
class Prices:
    """USD per hour, by (region, VM size), and where they came from."""

    hourly: dict[tuple[str, str], float]
    source: str

    def of(self, region: str, size: str) -> float | None:
        return self.hourly.get((region.lower(), size))


def _items(doc: Any, where: str) -> list[Any]:
    if isinstance(doc, list):
        return [item for page in doc for item in _items(page, where)]
    if not isinstance(doc, dict) or not isinstance(doc.get("Items"), list):
        raise AgkError(
            f"{where}: not an Azure Retail Prices API answer (no 'Items' list): save the JSON that"
            " https://prices.azure.com/api/retail/prices returns, or a list of such answers"
        )
    items: list[Any] = doc["Items"]
    return items


def parse(doc: Any, where: str) -> Prices:
    """The Linux pay-as-you-go hourly price of each VM size in ``doc``; one line naming ``where`` when it
    is not the API's shape."""
    hourly: dict[tuple[str, str], float] = {}
    for n, item in enumerate(_items(doc, where)):
        if not isinstance(item, dict):
            raise AgkError(f"{where}: Items[{n}] is not an object: save the API's JSON unchanged")
        if item.get("serviceName") != "Virtual Machines" or item.get("type") != "Consumption":
            continue
        if item.get("unitOfMeasure") != "1 Hour" or item.get("currencyCode", "USD") != "USD":
            continue
        if "Windows" in str(item.get("productName", "")):
            continue
        if any(word in str(item.get("skuName", "")) for word in _NOT_LINUX_ON_DEMAND):
            continue
        size, region, price = item.get("armSkuName"), item.get("armRegionName"), item.get("retailPrice")
        if not isinstance(size, str) or not isinstance(region, str) or isinstance(price, bool):
            raise AgkError(f"{where}: Items[{n}] lacks armSkuName, armRegionName or a numeric retailPrice")
        if not isinstance(price, int | float) or price < 0:
            raise AgkError(f"{where}: Items[{n}] retailPrice {price!r} is not a price: save the API's JSON unchanged")
        hourly[(region.lower(), size)] = float(price)
    return Prices(hourly, where)


def load(path: Path) -> Prices:
    """``path`` read and parsed (bad JSON or shape: one line naming the file and the fix)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise AgkError(
            f"--prices {path}: cannot be read ({err.__class__.__name__}): give the saved API answer"
        ) from None
    except json.JSONDecodeError as err:
        raise AgkError(f"--prices {path}: not JSON (line {err.lineno}): save the API's answer unchanged") from None
    return parse(doc, f"--prices {path}")
