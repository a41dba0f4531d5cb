"""The SMT layer: the fixed-point arithmetic as bit-vector terms (`symbolic`), a model and task
encoded as one formula (`encoding`), and the solver back ends (`solvers`: z3, bitwuzla, cvc5).
The `smt` engine (`verifier.engines.smt`) and the refutation's synthesis build on it."""
