"""Running verifications: one run (`api`: build a problem, pick an engine, replay every
counterexample, sample-check every proof), its progress line (`progress`), many runs (`sweep`,
`specs`), on a cluster (`cluster`), with their verdicts cached (`cache`)."""
