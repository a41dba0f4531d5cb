"""Support: what every layer may use and that uses nothing of the verifier -- errors, resource limits
(`budget`: deadlines, memory, workers), signals (`interrupts`), files written without overwriting
(`files`), JSON schemas and strict input reading (`schema`), user code run in a child process
(`usercode`), closed-form sizes (`sizes`) and the bibliography the verdicts cite (`papers`).
The layers are listed in docs/developing.md and enforced by tests/test_layers.py."""
