"""What a model gets wrong, and why: `refute` (`verify refute`: inputs any model in scope must get
wrong, by certificates, fooling sets and protocols), `count` (how many inputs a model gets wrong),
`certificates` and `certificate_check` (Chen and Zou's dependent sets), `fooling` and `protocol`
(Bhattamishra et al.'s communication arguments), `synthesis` (the smallest model that fits),
`shapes` and `separation` (`verify impossible`: which shapes cannot solve a task).
Every counterexample goes through `verifier.runs.api.replay`."""
