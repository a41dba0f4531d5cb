"""The errata: what the printed constructions of Bhattamishra et al. 2024 (arXiv:2406.09347), Chen and
Zou 2024 (arXiv:2404.01601) and, as transcribed, Sanford, Hsu, Telgarsky 2024b (arXiv:2402.09268) do,
each row a verdict about someone's paper.

A row (`Claim`) quotes the printed sentence or formula it is about, says the reading used (the
most charitable one the paper allows: a typo the paper corrects itself is read corrected, a step
it prescribes in words is done, a constant it leaves open is given a value, named in the row), and
is decided, every time the report runs, on three kinds of evidence:

* exact arithmetic (`verifier.exact`): the printed model, unquantized, on every input of a small
  task, or on the inputs the row shows where every input would take too long;
* the paper's own precision model: for Bhattamishra et al., the B.2 grid (step N^-Kc, range
  +-N^Kc, floor), at Kc = 1, 2, 3 until one decides the task right ("for some sufficiently large
  constant Kc > 0": the paper does not fix Kc); Chen and Zou state no precision (their model is
  real arithmetic, which the exact check decides); the transcribed paper was not read;
* binary fixed point FX(p, p // 2) at the report's p, by an engine; each counterexample labelled by
  why it fails (`exact.cause`: wrong in exact arithmetic too, saturation, or rounding).

`classify` turns the evidence into one `Finding`, the strongest that holds; the others are stated
in the row's notes.  Only the first two findings say "fails as printed".  Nothing in a row's
verdict is written by hand: the quote, the reading and what the paper leaves open are text, the
verdicts are recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from fractions import Fraction
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from . import exact
from .outputs.dump import write_dumps
from .runs.api import build_problem, run
from .support.errors import InputError, InternalError, UnbuildableError
from .support.papers import BHATTAMISHRA_2024, CHEN_ZOU_2024, SANFORD_HSU_TELGARSKY_2024B, Paper
from .tasks import flag
from .verdicts import Verdict

KCS = (1, 2, 3)  # the B.2 grid's Kc, tried in turn: the paper asks for "some sufficiently large" one


class Finding(str, Enum):
    """What the evidence supports about a printed claim, in the order `classify` tries them: a claim
    whose text was not read, or that cannot be built, is that before anything else."""

    UNVERIFIED = "as transcribed, unverified"
    CANNOT_BE_BUILT = "cannot be built as printed"
    WRONG_IN_EXACT = "wrong in exact arithmetic as printed"
    FAILS_IN_PAPER_PRECISION = "right in exact arithmetic, fails in the paper's own precision model"
    QUANTIZATION = "right in the paper's precision model, fails in binary fixed point"
    UNDERSPECIFIED = "underspecified"
    TYPO_CORRECTED = "typo corrected by the paper itself"

    @property
    def fails_as_printed(self) -> bool:
        return self in (Finding.WRONG_IN_EXACT, Finding.FAILS_IN_PAPER_PRECISION)


PRECISION = {  # what each paper states about its arithmetic
    BHATTAMISHRA_2024.arxiv: "Appendix B.2: \"for some sufficiently large constant Kc > 0, we will work with "
                             "numbers between -N^Kc to N^Kc with a step size of Delta = 1/N^Kc\"; \"z is rounded "
                             "down\"",
    CHEN_ZOU_2024.arxiv: "none stated: the constructions are real-valued, so the paper's model is exact arithmetic",
    SANFORD_HSU_TELGARSKY_2024B.arxiv: "not read",
}


@dataclass(frozen=True)
class Claim:
    """A printed claim, the reading used, and what decides it."""

    key: str  # the row's name (verify errata --row)
    claim: str  # what the paper states, at which size
    where: str  # section, theorem, equation
    quote: str  # the printed sentence or formula, with its context
    reading: str  # how it is read, and the values given to what it leaves open
    task: str
    N: int
    options: dict = field(default_factory=dict)  # task options
    printed: str = ""  # the formula the row is about, short (the table's)
    variant: str = "paper"  # the construction's variant that builds the reading
    paper: Paper = BHATTAMISHRA_2024
    open: tuple[str, ...] = ()  # constants or steps the paper leaves open: which, and the value used
    typo: Optional[str] = None  # a typo the paper corrects itself, and where it does
    transcribed: bool = False  # the paper's own text of it was not read
    every_input: bool = True  # exact arithmetic on every input (else on the inputs shown, the first
    # failures and the tightest input)
    inputs: tuple[str, ...] = ()  # inputs to decide by name (counterexamples this table printed before)
    compare: tuple[str, ...] = ()  # other readings (variants), decided in exact arithmetic beside it
    slip: Optional[str] = None  # a slip in the text that changes no answer under the reading used
    p: Optional[int] = None  # the binary FX precision, where the report's does not fit the claim
    also_p: tuple[int, ...] = ()  # further binary precisions
    round_threshold: bool = False  # also decide FX with F.2's printed threshold 1/N rounded like every
    # parameter, not compared exactly

    @property
    def precision(self) -> str:
        return PRECISION[self.paper.arxiv]


F2_QUOTE = ("\"If Att(X)_N^(2) >= 1/N then the FFN can output 1 and it can output 0 otherwise\", with "
            "Att(X)_N^(2) = (1/N) sum_{i=N/2}^N (x_i XOR x_{i-N/2}); \"Thus, for eta = log N + Kc log 2N the "
            "softmax attention weight at j = i - N/2 will be rounded to 1\"")
F2_READING = ("INEQ = I[m >= 1/N] with 1/N exact (the readout EQ = I[-m > -1/N]); eta = ln N + Kc ln 2N with "
              "the arithmetic's Kc; T from Corollary 8.1 (random signs, <T(i), T(j)> <= 1/4); embedding "
              "[x_i, 0, T(i), T(pi(i)), 1] with Q = eta [T(pi(i)), 1], K = [T(i), -1/2], V = [0, x_i, 0, 0]")
F2_OPEN = ("Kc: B.2's \"some sufficiently large constant Kc > 0\" (on the grid, the first of Kc = 1, 2, 3 that "
           "decides it right; in FX(p, f), Kc = f / log2 N)",
           "the XOR FFN: \"a simple ReLU FFN can compute the XOR\" ((ReLU(a - b) + ReLU(b - a)) / 2, exact on +-1)")
F2_TYPO = ("d = 2 + 2k for the five-part embedding [x_i, 0, T(i), T(i), 1] (read d = 3 + 2k), and Q(x_i) printed "
           "without its 1 for i > N/2, which the next line, A_ij = <T(i - N/2), T(j)> - 1/2, needs")
F2_PRINTED = "If Att(X)_N^(2) >= 1/N then the FFN can output 1"
F3_PRINTED = "the feedforward network can then compute the function g_{I_i}(x) at every position"
G2_PRINTED = "a scaling of the query vector and applying sigma(.) to the output will produce the desired label"
F3_QUOTE = ("\"the query vector contains j-th block from the last k blocks containing the positional vectors for "
            "each index in the set I_i\" ... \"using the arguments described in Theorem 6\"; \"the feedforward "
            "network can then compute the function g_{I_i}(x) at every position which can be done by a network "
            "of constant size\"; \"The ReLU-based feedforward network can then be used to subtract with a "
            "constant b/(N+1) and implement a threshold function\"")
F3_READING = ("BOS value 0 as printed; F.2's query [T, 1], key [T, -1/2] and printed eta = ln N + Kc ln 2N; "
              "T from Corollary 8.1; the FFN reads the retrieved bits (one g for each feature size); output "
              "I[m > b/(N+1)] with b/(N+1) exact")
F3_OPEN = ("the query's bias and scale: F.3 says only that the query \"contains the j-th block\" (F.2's [T, 1], "
           "[T, -1/2] and eta = ln N + Kc ln 2N are used)",
           "the feature FFN, \"a network of constant size\" (units ReLU(<u, z_1..t> - (t - 1)) whose coefficients "
           "give g exactly on z in {-1, 0, 1})",
           "Kc, as in F.2")
G2_QUOTE = ("Eq. 9 and \"<T(i), T(j)> = 1 +- gamma/100 if i = j, 0 +- gamma/100 otherwise\"; second layer: \"if the "
            "query vector Q(z_{2k-1}^(1)) = [(1/k) T_s(2j*)] ... Using the techniques used for the first layer, "
            "it is straightforward to see that a scaling of the query vector and applying sigma(.) to the output "
            "will produce the desired label y_{j*}\"")
G2_READING = ("T of width 2N (Hadamard rows), which meets gamma/100; the layer-2 query (1/k) T_s(2j*) scaled to "
              "eta2 T(2j*), eta2 = ln(18N) / (1 - gamma/50) (layer 1's rule eta = (1/tau) ln 18N at layer 2's "
              "margin); sigma(.) on the output by a ReLU FFN, readout I[Y > 1/2]; the label key's -2.3 read as "
              "the next line's -6 (3 C, C = -2 on labels)")
G2_OPEN = ("the layer-2 scale, \"a scaling of the query vector\" (eta2 = ln(18N) / (1 - gamma/50))",
           "the width of T, \"k = O(log N)\" with |<T(i), T(j)>| <= gamma/100 (k = 2N: no narrower T meets the "
           "bound at these sizes, since (2N - 1) gamma/100 < 1 makes the Gram matrix of full rank)")
G2_TYPO = ("K(z_2i) = [0_d, -2.3, T(2i)]: the next line, <Q(z_{2k-1}), K(z_2i)> = 0 - 6 +- gamma/10 <= -5, "
           "gives that entry as -6, 3 times the label's -2 as the point keys' 3 is 3 times the points' 1: the "
           "printed -2.3 reads as -2 . 3")

CLAIMS = [
    Claim("f2-n6", "equality, N = 6 (not a power of 2)", "Theorem 6, Appendix F.2", F2_QUOTE, F2_READING,
          "equality", 6, open=F2_OPEN, typo=F2_TYPO, round_threshold=True,
          printed=F2_PRINTED),
    Claim("f2-n12", "equality, N = 12 (not a power of 2)", "Theorem 6, Appendix F.2", F2_QUOTE, F2_READING,
          "equality", 12, open=F2_OPEN, typo=F2_TYPO, every_input=False, round_threshold=True,
          printed=F2_PRINTED),
    Claim("f2-n16", "equality, N = 16 (a power of 2)", "Theorem 6, Appendix F.2", F2_QUOTE, F2_READING,
          "equality", 16, open=F2_OPEN, typo=F2_TYPO, every_input=False,
          printed=F2_PRINTED),
    Claim("f3-disjointness", "disjointness, N = 12 (I_i = {i, i + N/2}, g = AND, b = 0)",
          "Theorem 13, Appendix F.3", F3_QUOTE, F3_READING, "disjointness", 12, open=F3_OPEN, every_input=False,
          printed="subtract with a constant b/(N+1) and implement a threshold function"),
    Claim("f3-shared-g", "a sparse threshold with one g shared by every feature, N = 10",
          "Theorem 13, Appendix F.3", F3_QUOTE, F3_READING, "sparse_threshold", 10, {"shared_g": True},
          open=F3_OPEN, every_input=False,
          printed=F3_PRINTED),
    Claim("f3-g-by-position", "a sparse threshold whose g varies by position, N = 10", "Theorem 13, Appendix F.3",
          "\"For the i-th input x_i the first coordinate will contain the input x_i ... The next r indices will "
          "contain the positional vector T(i) ... the k blocks will contain vectors T(I_i^1), ..., T(I_i^k)\"; "
          "\"the feedforward network can then compute the function g_{I_i}(x) at every position which can be done "
          "by a network of constant size because k = O(1) does not depend on N\"",
          F3_READING, "sparse_threshold", 10,
          printed=F3_PRINTED + " which can be done by a network of constant size"),
    Claim("g2-nearest-neighbour", "nearest neighbour, N = 4, d' = 2, gamma = 1", "Theorem 7, Appendix G.2",
          G2_QUOTE, G2_READING, "nearest_neighbour", 4, open=G2_OPEN, typo=G2_TYPO, inputs=("++ 1 +- 0 ++",),
          printed=G2_PRINTED),
    Claim("g2-key-2.3", "nearest neighbour with the label key -2.3 itself, N = 4", "Theorem 7, Appendix G.2",
          "\"K(z_2i) = [0_d, -2.3, T(2i)] for i = 1, ..., k\"; next: \"<Q(z_{2k-1}), K(z_2i)> = 0 - 6 +- "
          "gamma/10 <= -5\"",
          "-2.3 built as printed: a linear key (23/20) C + (37/20) sum_{odd q} <T(q), B4>, exactly 3 on points and "
          "-2.3 on labels; the rest as in the G.2 row; beside it the G.2 row's reading (-6)",
          "nearest_neighbour", 4, variant="literal", typo=G2_TYPO, compare=("paper",),
          printed="K(z_2i) = [0_d, -2.3, T(2i)]"),
    Claim("g2-mqar", "MQAR (G.2's construction on keys and queries), N = 6, 3 symbols", "Theorem 7, Appendix G.2",
          G2_QUOTE, G2_READING, "mqar", 6, open=G2_OPEN, typo=G2_TYPO, every_input=False,
          inputs=("++ 1 +- 0 -+ 0 ++",),
          printed=G2_PRINTED),
    Claim("c2-index-lookup", "index lookup, N = 6, sigma = 2", "Theorem 1, Appendix C.2",
          "\"We can define the matrices W_Q = eta[O; I; O], W_K = [O, O, I], W_V = [I, O, O] ... With these "
          "definitions we get that the query vector Q(p) = eta[T(p)] contains the middle part of the input "
          "embedding\"",
          "W_Q as the (d, k) matrix of the row-vector form Q(x) = x W_Q, which F.2 writes (\"Q(x_i) = x_i W_Q\"); "
          "W_K, W_V in Section 2's column form; T from Corollary 8.1; eta = 2 ln(3N), the bound of \"for any "
          "eta > 2 log(3N)\"",
          "index_lookup", 6, {"sigma": 2},
          typo="W_Q = eta[O; I; O] stacks its blocks for the row-vector form, where Section 2 writes Q(x_i) = W_Q "
               "x_i; the next sentence, \"Q(p) = eta[T(p)] contains the middle part of the input embedding\", "
               "says which map is meant (a notation slip)",
          printed="W_Q = eta[O; I; O]"),
    Claim("lemma3-memorization", "memorization, all 64 sequences of length 3 over 4 tokens",
          "Theorem 1, Appendix 12, Lemmas 3 and 4",
          "\"we can first solve the equation x_{i_k} Delta w_k = -1, x_k Delta w_k = 1, and then rescale the "
          "Delta w_k = (1/M) Delta w_k to ensure that the vibration for any other rows is less than epsilon\"",
          "Lemma 4's n heads; Lemma 3's induction on the vectors they produce, in exact rationals",
          "memorization", 3, {"alphabet": 4}, paper=CHEN_ZOU_2024,
          open=("the solution of each system (the minimum-norm one)",
                "M (max(1, 2 max_i |x_i Delta w_k| / epsilon): each vibration at most epsilon/2)"),
          inputs=("d b b CLS",), also_p=(11,),
          printed="rescale the Delta w_k = (1/M) Delta w_k"),
    Claim("icqa", "in-context QA, k = 3, 4 questions, 4 answers", "Theorem 3, Appendix 13.2",
          "\"H^(2)[n-1] = ... = [6 q_0; 6; 3 a_0; 3 p_{3k,3k+1} + 3 p_{0,1,2}], we then set the classification "
          "W_O = [0_{d2 x (d1+1)}, I_{d2}, 0_{d2 x (n-(d1+d2+1))}]^T, in this way, the prediction result of our "
          "construct transformer TF is TF(H^(0)) = a_1\" (with r = 0: \"we will set r = 0 in the following proof\")",
          "as printed; the answer is a_r", "icqa", 3, {"nq": 4, "na": 4}, paper=CHEN_ZOU_2024,
          typo="\"TF(H^(0)) = a_1\" where the proof sets r = 0 and the line before gives 3 a_0",
          printed="TF(H^(0)) = a_1"),
    Claim("template-matching", "template matching, all 5 templates of length 3 over 4 symbols",
          "Theorem 5, Appendix 14.2",
          "\"W_V^(1) = -I_{(d+1) x (d+1)} ... + [0_{(d+1) x (n)} 0; I_{n x n} 0; 0 0]\"; \"H^(1) = H^(0) + W_V^(1) "
          "H^(0) alpha^(1) = H^(0) + [-x_0 ... -x_{k-1} 0; 0 ... 0 -1; p'_0 ... p'_{k-1} p_k; 0] = [0 ... 0; 0 ... 0; "
          "p'_0 + p_0 ... p_k + p_k; 0]\"; \"Sequence from the same template have the same representation\"; \"First "
          "we construct a inductive head with alpha = [0 ... 0; 3^{k-1} 3^{k-2} ... 3^0 0]^T, and set W_V^(2) = I\"; "
          "\"Then utilizing 3, we can construct a W_C in R^{d' x C} map each vector to their distinct label\"",
          "W_QK^(1) = I on the token rows, as printed; W_V^(1)'s identity block on the P rows, as the text's H^(1) "
          "shows; p'_i written into the spare zero rows, so that layer 2's alpha is Lemma 1's on one-hot positions; "
          "W_C by Lemma 3 (exact rationals; minimum-norm solutions, M as in the Lemma 3 row) fitted on the template "
          "vectors: the layer-2 vectors with the token rows 0, as the text's H^(1) shows them; beside it W_C fitted "
          "on one sequence per template (sequence-fit), and the maps exactly as printed (paper)",
          "template_matching", 3, {"alphabet": 4}, variant="charitable", paper=CHEN_ZOU_2024,
          compare=("sequence-fit", "paper"),
          open=("the vectors W_C is fitted on: \"map each vector to their distinct label\" after \"Sequence from the "
                "same template have the same representation\" (the template vectors, token rows 0 as the text's H^(1) "
                "shows them)",
                "layer 2's W_QK, and so where layer 1 writes p'_i: the text gives layer 2 only alpha, which Lemma 1 "
                "builds on one-hot positions (\"Note that P = [p_0, ..., p_{n-1}] = I\"); the printed W_V^(1) writes "
                "p'_i + p_i there, and then no W_QK gives alpha on every input (sources are scored linearly against "
                "the one CLS column: ααα and αβγ ask w_P0 - w_P1 = 6 and 3); p'_i goes into the spare zero rows the "
                "text provides, \"(d' - (n + 1 + d)) x n\" (written into P, layer 2's attention is another "
                "token-invariant map, and the answers are the same)"),
          typo="W_V^(1)'s identity block [0_{(d+1) x n}; I_{n x n}; 0] sits on the first n input coordinates, the "
               "token rows; the text's own H^(1), with p'_i + p_i in the position rows, says it copies the positions",
          slip="the displayed H^(1) has token rows -x_i + x_i = 0, but -I on the token rows subtracts c_i x_i where "
               "c_i positions share the token, leaving (1 - c_i) x_i (`b b b CLS`: -26 e_b at layer 2): sequences of "
               "one template differ there, where W_C fitted on the template vectors puts no weight (fitted on one "
               "sequence per template, it does: sequence-fit); and CLS, whose token rows are 0, scores 0 with itself "
               "under the printed W_QK^(1), so its flag stays 1 and it gets no p'_k where H^(1) shows -1 and p_k, a "
               "constant of every vector",
          printed="utilizing 3, we can construct a W_C ... map each vector to their distinct label"),
    Claim("ictm", "in-context template matching, k = 2, l = 2, 3 symbols, 3 answers", "Theorem 6, Appendix 15",
          "\"we perform a pre-match and copy procedure by constructing an instructive attention alpha^(2) in "
          "R^{n x n}\", the display in words: alpha^(2) = (block diagonal of A_{(l+2) x (l+2)}, \"(k-1) times\", and "
          "A_{(l+1) x (l+1)})^T + (k times the rows [0_{(l+2) x (d-(l+1))}, B_{(l+2) x (l+1)}], then "
          "[0_{(l+1) x (d-(l+1))}, 0_{(l+1) x (l+1)}])^T, \"A_{(l+2) x (l+2)} = [0_{(l+2) x (l+1)} 1_{(l+2) x 1}], "
          "A_{(l+1) x (l+1)} = [0_{l x (l+1)}; 1_{1 x (l+1)}], and B_{(l+2) x (l+1)} = [I_{(l+1) x (l+1)}; "
          "0_{1 x (l+1)}]\"; \"The left part of alpha^(2) copies the answer to each column of the question\"; layer "
          "3: \"W^(3)_{QK_i} = [0_{(d'-l) x (d'-l)} 0; 0 M_i], W^(3)_{V_i} = -I\", \"If any row of the template "
          "representation is not zero, there exist at least one attention head that subtracts the corresponding "
          "answer from the last token\"; \"TF_3(H^(3))[n-1] = sum_{i=0}^{k-1} a_i - sum_{i=0, i != r}^{k-1} gamma_i "
          "a_i (gamma_i >= 1)\", \"which has the largest element corresponding to the final answer a_r\"",
          "the printed maps on Theorem 6's stream (d' = d + n + l + 2), the typos read corrected; layer 3's M_i on "
          "the template rows, as the words \"If any row of the template representation is not zero\" say, where "
          "the printed [0; M_i] sits on the last l rows (for l = 2 the offsets of the sign and the answer, which "
          "nothing writes); beside it that placement as printed (paper); 3 answers for 2 blocks (\"We first "
          "randomly choose k templates from T and k answers from the answer token set A\")",
          "ictm", 2, {"length": 2, "na": 3}, variant="charitable", paper=CHEN_ZOU_2024, compare=("paper",),
          open=("W_pp's value across blocks: \"-infinity\", which Lemma 2 allows to be \"some sufficiently large "
                "negative value\" (-1: content scores are 0 or 1)",),
          typo="alpha^(2)'s second term is printed with widths (d - (l+1)) + (l+1) = d where the text declares "
               "alpha^(2) in R^{n x n} (read n: B on the query block's columns); the block diagonal's \"(k-1) "
               "times\" (n x n needs k blocks A_{(l+2) x (l+2)}); W_QK^(1)'s lower-left block I_{(d'-d1) x d1}, where "
               "the text says the layer is \"the parsing process in the template generalization task\", whose "
               "W_QK^(1) is [I_{d x d} 0; 0 0] (read 0)",
          printed="TF_3(H^(3))[n-1] = sum_{i=0}^{k-1} a_i - sum_{i != r} gamma_i a_i"),
    Claim("sht-d2-spacing", "induction heads, angle spacing N, N = 6, sigma = 4",
          "Theorem 4.2 (k = 1), Lemmas D.1 and D.2",
          "not the paper's text: the transcription used, q_i = s2 (QA, ONE), k_j = (KA, cos(2 pi (N - 1/2)/N') "
          "BOS), QA = sum_a TOK[a] c(D a + i; N'), KA = sum_a PREV[a] c(D a + i; N'), N' = D sigma, D = N",
          "as transcribed; the scales by Lemma A.2 (margin times scale = ln 8N)",
          "induction_heads", 6, {"sigma": 4}, variant="sht-printed", paper=SANFORD_HSU_TELGARSKY_2024B,
          transcribed=True, every_input=False, p=24,
          printed="angle spacing D = N (the transcription's)"),
]


# -- evidence ----------------------------------------------------------------------------------------

@dataclass
class Decided:
    """One input: its answer in exact arithmetic, and, where it failed in a format, why (`exact.cause`:
    exact, saturation or rounding)."""

    input: str
    tokens: list[int]
    exact: str  # right | wrong | undecided
    text: str  # the exact outcome in words
    margin: str = ""  # its margin in exact arithmetic
    cause: Optional[str] = None  # why it fails in `failed_in`
    failed_in: Optional[str] = None  # the format it failed in
    produced: Optional[str] = None  # what the format answered there

    def line(self) -> str:
        if self.cause is None:
            return f"`{self.input}`: {self.text}"
        return f"`{self.input}` fails in {self.failed_in} (got {self.produced}): {self.text}"


@dataclass
class Exact:
    """The reading (a variant) in exact arithmetic: on every input, or on the inputs shown."""

    variant: str
    built_for: str  # the format whose Kc the construction was built with (its scales may depend on it)
    every_input: bool
    verdict: Verdict  # over every input, or over the inputs decided
    checked: int  # inputs decided
    total: int  # the task's inputs
    min_margin: Optional[str] = None
    wrong: Optional[Decided] = None  # the first input wrong in exact arithmetic
    decided: list[Decided] = field(default_factory=list)  # inputs decided by name
    wrong_count: Optional[int] = None  # on every input: how many are wrong

    @property
    def right_everywhere(self) -> bool:
        return self.every_input and self.verdict == Verdict.PROVED

    def text(self, short: bool = False) -> str:
        if self.wrong is not None:
            count = f"{self.wrong_count:,} of {self.checked:,} inputs" if self.wrong_count is not None else ""
            if short:
                return f"wrong on {count + ', e.g. ' if count else ''}`{self.wrong.input}` (margin {self.wrong.margin})"
            return f"wrong on {count}; the first: {self.wrong.line()}" if count else f"wrong: {self.wrong.line()}"
        if self.every_input:
            what = {Verdict.PROVED: "right on every input", Verdict.UNKNOWN: "undecided on some input"}[self.verdict]
            return f"{what} ({self.checked:,}), min margin {self.min_margin}"
        right = sum(d.exact == "right" for d in self.decided)
        return (f"right on {right} of the {self.checked} input{'s' if self.checked != 1 else ''} decided, "
                f"{self.checked - right} undecided" if right < self.checked else
                f"right on the {self.checked} input{'s' if self.checked != 1 else ''} decided") + " (not every input)"


@dataclass
class Run:
    """An engine's run of the reading in one format."""

    spec: str  # the format as --format / --p name it: b2:2, fx:12
    name: str  # the format, short: FX(12, 6), Kc = 2
    arithmetic: str  # the format in words
    verdict: str
    covered: int
    total: int
    failure: Optional[Decided] = None  # its first counterexample, with its cause
    dump: Optional[str] = None
    tightest: Optional[list[int]] = None  # an input of least margin
    note: str = ""  # how the model departs from the reading (a rounded threshold)

    def text(self) -> str:
        if self.failure is not None:
            return f"{self.name}: refuted, `{self.failure.input}` ({self.failure.cause})"
        return f"{self.name}: {self.verdict}" + (f" ({self.covered:,} of {self.total:,} covered)"
                                                 if self.verdict == "unknown" else "")


@dataclass
class PaperModel:
    """The claim in the paper's own precision model: the B.2 grid at Kc = 1, 2, ... until one is
    right; or the paper states none (exact arithmetic decides), or it was not read."""

    stated: str
    read: bool = True  # the paper's text was read
    runs: list[Run] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """right | fails (at every Kc tried) | undecided | none stated | not read."""
        if not self.runs:
            return "none stated" if self.read else "not read"
        if self.runs[-1].verdict == "proved":
            return "right"
        return "fails" if all(r.verdict == "refuted" for r in self.runs) else "undecided"

    @property
    def kc(self) -> Optional[int]:
        return KCS[len(self.runs) - 1] if self.verdict == "right" else None

    def text(self) -> str:
        if not self.runs:
            return self.stated
        return "B.2 grid: " + "; ".join(r.text() for r in self.runs)


@dataclass
class Row:
    claim: Claim
    finding: Finding
    verdict: str  # one line: the finding, in the words the evidence supports
    notes: list[str]  # the other findings
    unbuildable: Optional[str] = None  # why the reading cannot be built
    exact: list[Exact] = field(default_factory=list)  # the reading, then the compared ones
    paper_model: Optional[PaperModel] = None
    binary: list[Run] = field(default_factory=list)  # FX at p, then with the threshold rounded, then also_p

    @property
    def shown(self) -> Optional[Decided]:
        """The counterexample the row shows: an input wrong in exact arithmetic, else the first
        failure of the paper's model or of FX."""
        if self.exact and self.exact[0].wrong is not None:
            return self.exact[0].wrong
        runs = (self.paper_model.runs if self.finding is Finding.FAILS_IN_PAPER_PRECISION and self.paper_model
                else []) + self.binary[:1]
        return next((r.failure for r in runs if r.failure is not None), None)


def classify(claim: Claim, unbuildable: Optional[str], exact_: Optional[Exact], model: Optional[PaperModel],
             binary: list[Run]) -> Finding:
    """The strongest finding the evidence supports."""
    if claim.transcribed:
        return Finding.UNVERIFIED
    if unbuildable is not None:
        return Finding.CANNOT_BE_BUILT
    assert exact_ is not None and model is not None, "a claim that was built has both"
    if exact_.wrong is not None:
        return Finding.WRONG_IN_EXACT
    if exact_.right_everywhere and model.verdict == "fails":
        return Finding.FAILS_IN_PAPER_PRECISION
    model_right = model.verdict == "right" or (model.verdict == "none stated" and exact_.right_everywhere)
    if model_right and binary and binary[0].verdict == "refuted":
        return Finding.QUANTIZATION
    if claim.open:
        return Finding.UNDERSPECIFIED
    if claim.typo:
        return Finding.TYPO_CORRECTED
    raise InternalError(f"errata row {claim.key}: the evidence supports no finding (right everywhere, nothing "
                        f"left open, no typo): it is not a row of the errata")


# -- deciding a claim ----------------------------------------------------------------------------------

class Runner:
    """Builds and decides the problems of the rows, each exact search once (rows that share a
    reading share its search)."""

    def __init__(self, engine: str = "auto", timeout: Optional[float] = None, dump_dir: Optional[Path] = None):
        self.engine, self.timeout, self.dump_dir = engine, timeout, dump_dir
        self._searched: dict = {}

    def problem(self, claim: Claim, variant: Optional[str] = None, **arith):
        return build_problem(claim.task, N=claim.N, variant=variant or claim.variant, **arith, **claim.options)

    def engine_run(self, problem, spec: str, name: str, dump: bool = False, note: str = "") -> Run:
        result = run(problem, self.engine, timeout=self.timeout)
        tightest = None if result.tightest is None else [int(t) for t in problem.task.decode(result.tightest["index"])]
        out = Run(spec, name, problem.arith.label(), result.verdict, result.covered, result.total, tightest=tightest,
                  note=note)
        if result.counterexamples:
            c = result.counterexamples[0]
            out.failure = self.judge(problem, c.tokens, name, c.produced)
            if dump and self.dump_dir is not None:
                out.dump = str(write_dumps(result, self.dump_dir)[0])
        return out

    def judge(self, problem, tokens, fmt: Optional[str] = None, produced: Optional[str] = None) -> Decided:
        """An input in exact arithmetic; with `fmt`, an input that failed there, and why."""
        text = problem.task.render(tokens)
        if fmt is None:
            o = exact.check(problem, tokens)
            return Decided(text, list(map(int, tokens)), o.verdict, o.describe(problem.task),
                           exact.interval_text(o.margin))
        why = exact.cause(problem, tokens)
        if why.kind == "none":
            raise InternalError(f"{text} failed in {fmt} but the evaluator gets it right")
        return Decided(text, list(map(int, tokens)), why.exact.verdict, why.text(problem.task),
                       exact.interval_text(why.exact.margin), why.kind, fmt, produced)

    def search(self, claim: Claim, variant: str, p: int) -> exact.ExactSearch:
        key = (claim.task, claim.N, tuple(sorted(claim.options.items())), variant, p)
        if key not in self._searched:
            self._searched[key] = exact.search(self.problem(claim, variant, p=p))
        return self._searched[key]

    def exact(self, claim: Claim, variant: str, p: int, shown: list[list[int]]) -> Exact:
        problem = self.problem(claim, variant, p=p)
        task = problem.task
        if claim.every_input:
            found = self.search(claim, variant, p)
            wrong = None
            if found.wrong:
                wrong = self.judge(problem, found.wrong[0][1].tokens)
            return Exact(variant, _fx(p), True, found.verdict, found.checked, found.checked,
                         exact.interval_text(found.min_margin), wrong, [self.judge(problem, t) for t in shown],
                         len(found.wrong))
        decided = [self.judge(problem, t) for t in shown]
        verdicts = [d.exact for d in decided]
        verdict = Verdict.REFUTED if "wrong" in verdicts else Verdict.UNKNOWN
        wrong = next((d for d in decided if d.exact == "wrong"), None)
        return Exact(variant, _fx(p), False, verdict, len(decided), task.total, None, wrong, decided)


def _fx(p: int) -> str:
    return f"FX({p}, {p // 2})"


def _tokens(problem, text: str) -> list[int]:
    vocab = list(problem.task.vocab)
    try:
        return [vocab.index(w) for w in text.split()]
    except ValueError:
        raise InputError(f"{text!r} is not an input of {problem.task.name}") from None


def _rounded_threshold(problem):
    """F.2's readout EQ = I[-m > -1/N] with the printed 1/N rounded like every parameter, R(1/N):
    the problem with it, and R(1/N)."""
    model, arith = problem.model, problem.arith
    printed = -Fraction(model.readout.theta)
    rounded = int(arith.quantize(np.array([printed], dtype=object))[0][0]) * Fraction(arith.num, arith.den)
    return replace(problem, model=replace(model, readout=replace(model.readout, theta=-rounded))), rounded


def decide(claim: Claim, p: int = 12, runner: Optional["Runner"] = None) -> Row:
    """Decide one claim: exact arithmetic, the paper's precision model, FX(p, p // 2)."""
    runner = runner or Runner()
    p = claim.p or p
    try:
        fx = runner.problem(claim, p=p)
    except UnbuildableError as exc:
        reason = str(exc).split(": ", 1)[-1]
        finding = classify(claim, reason, None, None, [])
        return _row(claim, finding, unbuildable=reason)
    binary = [runner.engine_run(fx, f"fx:{p}", _fx(p), dump=True)]
    if claim.round_threshold:
        rounded, theta = _rounded_threshold(fx)
        printed = -Fraction(fx.model.readout.theta)
        binary.append(runner.engine_run(rounded, f"fx:{p}", f"{_fx(p)}, {printed} rounded",
                                        note=f", with the printed threshold {printed} rounded like every parameter "
                                             f"(to {theta})"))
    binary += [runner.engine_run(runner.problem(claim, p=q), f"fx:{q}", _fx(q)) for q in claim.also_p]
    model = PaperModel(claim.precision, not claim.transcribed)
    if claim.paper is BHATTAMISHRA_2024:
        for kc in KCS:
            model.runs.append(runner.engine_run(runner.problem(claim, arith=f"b2:{kc}"), f"b2:{kc}", f"Kc = {kc}"))
            if model.runs[-1].verdict == "proved":
                break
    shown = [_tokens(fx, t) for t in claim.inputs]
    if not claim.every_input:  # the failures and the tightest inputs stand for the rest
        shown += [r.failure.tokens for r in binary + model.runs if r.failure is not None]
        shown += [r.tightest for r in binary[:1] if r.tightest is not None]
    shown = [list(t) for t in dict.fromkeys(tuple(t) for t in shown)]
    exacts = [runner.exact(claim, claim.variant, p, shown)]
    exacts += [runner.exact(claim, variant, p, shown) for variant in claim.compare]
    finding = classify(claim, None, exacts[0], model, binary)
    return _row(claim, finding, exacts, model, binary)


def _row(claim: Claim, finding: Finding, exacts: Optional[list[Exact]] = None, model: Optional[PaperModel] = None,
         binary: Optional[list[Run]] = None, unbuildable: Optional[str] = None) -> Row:
    row = Row(claim, finding, "", [], unbuildable, exacts or [], model, binary or [])
    row.verdict, row.notes = _words(row)
    return row


def _words(row: Row) -> tuple[str, list[str]]:
    """The row's verdict line, and its other findings, each saying what its evidence supports."""
    c, f = row.claim, row.finding
    notes = []
    if row.exact:
        for i, e in enumerate(row.exact):
            what = f"exact arithmetic, {'another reading, ' if i else ''}{e.variant} as built for {e.built_for}"
            notes.append(f"{what}: {e.text()}")
            notes += [f"{what}: {d.line()}" for d in e.decided if d != e.wrong]
    if row.paper_model is not None:
        model = row.paper_model
        notes.append(f"the paper's precision model: {model.text()}" + (f" ({model.stated})" if model.runs else ""))
    for r in row.binary:
        notes.append(f"binary fixed point, {r.arithmetic}{r.note}: " + (f"refuted: {r.failure.line()}" if r.failure
                                                                        else r.verdict))
    notes += [f"left open: {o}" for o in c.open] + ([f"typo the paper corrects itself: {c.typo}"] if c.typo else [])
    notes += [f"slip in the text, which changes no answer under the reading used: {c.slip}"] if c.slip else []
    if f is Finding.UNVERIFIED:
        ex = row.exact[0] if row.exact else None
        what = f"the transcription is {ex.text()}" if ex else "not decided"
        verdict = f"as transcribed, unverified: the paper's own text ({c.paper.short}, {c.where}) was not read; {what}"
    elif f is Finding.CANNOT_BE_BUILT:
        verdict = f"cannot be built as printed: {row.unbuildable.split('. ')[0]}"
    elif f is Finding.WRONG_IN_EXACT:
        verdict = f"fails as printed, in exact arithmetic under the reading used: {row.exact[0].text()}"
    elif f is Finding.FAILS_IN_PAPER_PRECISION:
        verdict = (f"fails as printed, in the paper's precision model: right in exact arithmetic, "
                   f"{row.paper_model.text()}")
    elif f is Finding.QUANTIZATION:
        precision = row.paper_model.text() if row.paper_model.runs else "exact arithmetic (no precision stated)"
        verdict = (f"not an erratum: right in the paper's precision model ({precision}); FX fails: "
                   f"{row.binary[0].failure.line()}: a finding about binary fixed point")
    elif f is Finding.UNDERSPECIFIED:
        verdict = f"not an erratum: the paper leaves open {'; '.join(c.open)}"
    else:
        verdict = f"not an erratum: {c.typo}"
    return verdict, notes


def run_errata(p: int = 12, dump_dir: Optional[str] = None, engine: str = "auto", timeout: Optional[float] = None,
               claims: Optional[list[Claim]] = None, progress: Optional[Callable[[str], None]] = None) -> list[Row]:
    """Decide every claim (or the given ones), in order."""
    runner = Runner(engine, timeout, Path(dump_dir) if dump_dir else None)
    rows = []
    for claim in claims or CLAIMS:
        rows.append(decide(claim, p, runner))
        if progress:
            progress(f"{claim.key}: {rows[-1].finding.value}")
    return rows


def select(keys: list[str]) -> list[Claim]:
    """The claims by key (`verify errata --row`), in the table's order."""
    known = {c.key: c for c in CLAIMS}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise InputError(f"no errata row {', '.join(unknown)}; the rows: {', '.join(known)}")
    return [c for c in CLAIMS if c.key in keys]


# -- output --------------------------------------------------------------------------------------------

def to_markdown(rows: list[Row]) -> str:
    lines = ["| row | paper | printed | class | exact arithmetic | the paper's precision model | binary fixed point | "
             "counterexample shown, or why it cannot be built |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.claim
        opts = "".join(f" {flag(k)}" + ("" if v is True else f" {v}") for k, v in c.options.items())
        ex = "; ".join(f"{e.variant}: {e.text(short=True)}" for e in r.exact) or "-"
        model = "-" if r.paper_model is None else r.paper_model.text() if r.paper_model.runs else r.paper_model.verdict
        binary = "; ".join(b.text() for b in r.binary) or "-"
        shown = r.shown
        why = r.unbuildable.split(". ")[0] if r.unbuildable else "-" if shown is None else f"`{shown.input}`: " + (
            "wrong in exact arithmetic" if shown.exact == "wrong" else f"{shown.cause} in {shown.failed_in}")
        printed = c.printed if c.transcribed else f'"{c.printed}"'
        lines.append(f"| {c.key} | {c.paper.cite(c.where)} | {c.claim}: {printed} (`{c.task}{opts}`, variant "
                     f"{c.variant}) | {r.finding.value} | {ex} | {model} | {binary} | {why} |")
    return "\n".join(lines)


def to_text(rows: list[Row]) -> str:
    """Every row in full: the quote, the reading, the verdict and each finding."""
    out = []
    for r in rows:
        c = r.claim
        out += [f"{c.key}: {c.paper.cite(c.where)}: {c.claim}",
                f"  printed   {c.quote}",
                f"  reading   {c.reading} (variant {c.variant})",
                f"  class     {r.finding.value}",
                f"  verdict   {r.verdict}"]
        out += [f"  finding   {n}" for n in r.notes] + [""]
    return "\n".join(out)


def to_json(rows: list[Row]) -> list[dict]:
    def run_json(r: Run) -> dict:
        return {"format": r.spec, "name": r.name, "arithmetic": r.arithmetic, "verdict": r.verdict,
                "covered": r.covered, "total": r.total, "counterexample": r.failure and vars(r.failure), "dump": r.dump}

    return [{"row": r.claim.key, "paper": r.claim.paper.cite(r.claim.where), "claim": r.claim.claim,
             "quote": r.claim.quote, "reading": r.claim.reading, "task": r.claim.task, "N": r.claim.N,
             "options": r.claim.options, "variant": r.claim.variant, "class": r.finding.value,
             "fails_as_printed": r.finding.fails_as_printed, "verdict": r.verdict, "findings": r.notes,
             "left_open": list(r.claim.open), "typo": r.claim.typo, "slip": r.claim.slip, "unbuildable": r.unbuildable,
             "exact": [{"variant": e.variant, "every_input": e.every_input, "verdict": e.verdict,
                        "checked": e.checked, "total": e.total, "wrong_count": e.wrong_count,
                        "min_margin": e.min_margin,
                        "wrong": e.wrong and vars(e.wrong), "decided": [vars(d) for d in e.decided]}
                       for e in r.exact],
             "paper_precision": None if r.paper_model is None else
             {"stated": r.paper_model.stated, "verdict": r.paper_model.verdict, "Kc": r.paper_model.kc,
              "runs": [run_json(x) for x in r.paper_model.runs]},
             "binary": [run_json(b) for b in r.binary],
             "shown": r.shown and vars(r.shown)} for r in rows]
