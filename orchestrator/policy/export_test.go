package policy

// WeakerThan exposes Decision.weakerThan to the black-box tests.
func WeakerThan(d, o Decision) []string { return d.weakerThan(o) }
