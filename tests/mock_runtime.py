"""Reading results of a program run under Pulumi's mock runtime only once it has settled."""

from __future__ import annotations

from typing import Any

import pulumi


def settled(value: pulumi.Input[Any]) -> Any:
    """``value`` once every registration of the program has finished.

    An apply on one output alone may run before resources it does not depend on are registered;
    `pulumi.runtime.test` waits for all outstanding registrations before it returns.
    """
    box: list[Any] = []

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        return pulumi.Output.from_input(value).apply(box.append)

    program()
    return box[0]
