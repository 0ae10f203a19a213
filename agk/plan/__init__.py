"""Planning a stack offline: the real ``infra/`` program under Pulumi's mock runtime (:mod:`agk.plan.engine`),
the change against a base (``diff``, ``blast``, ``restarts``) and the reports; the command that runs them
and adds the policy pack's verdict is :mod:`agk.plan_command`.
"""
