package affinity

// LoadBand is how many operations above the least loaded candidate a candidate may be and
// still be chosen: affinity may pick a warmer cache over a slightly busier backend, never
// over a clearly busier one.
const LoadBand = 1

// Outcome says how Select chose, for metrics and logs.
type Outcome uint8

const (
	// OutcomeNone: there was no candidate.
	OutcomeNone Outcome = iota
	// OutcomeHit: a candidate in the load band has a hint covering at least half of the
	// scanned request.
	OutcomeHit
	// OutcomeMiss: no candidate has a hint; rendezvous hashing chose.
	OutcomeMiss
	// OutcomeShort: hints exist but cover less than half of the scanned request; rendezvous
	// hashing chose.
	OutcomeShort
	// OutcomeBusy: only candidates outside the load band have a valid hint; rendezvous
	// hashing chose among the others.
	OutcomeBusy
	// OutcomeShared: the only hints that cover half of the request end before its first user
	// message (SelectPrint): they mark a prefix conversations share, not this conversation;
	// rendezvous hashing chose.
	OutcomeShared
)

var outcomeNames = [...]string{"none", "hit", "miss", "short", "busy", "shared"}

// String returns the outcome's metric label ("hit", "miss", "short", "busy", "shared",
// "none").
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Choice is Select's answer.
type Choice struct {
	// Index is the chosen candidate's position in the slice given to Select, -1 when it was
	// empty.
	Index int
	// Prefix is the matched prefix in canonical bytes on OutcomeHit, else 0. It is a routing
	// measure, not a count of cached tokens.
	Prefix  int
	Outcome Outcome
}

// Select chooses among cands (after Index.Lookup filled their Prefix and Used) for a request
// whose print scanned the given number of canonical bytes (Print.Scanned) and whose
// conversation key is conv (Print.Conversation). It is a pure function of its arguments.
//
//   - Only candidates whose Load is at most LoadBand above the least Load are eligible.
//   - A hint counts when it covers at least half of the scanned request (2·Prefix ≥
//     scanned): a shorter shared prefix saves too little prefill to outweigh balance.
//   - Of the eligible candidates with a valid hint, the longest Prefix wins; of equal ones
//     the lower Load, then the most recently learned (larger Used), then the higher
//     rendezvous weight.
//   - Without one, the eligible candidate with the highest rendezvous weight for conv
//     (RendezvousWeight) wins: every gateway replica, without shared state, sends a
//     conversation to the same backend while the candidates and their loads agree.
func Select(cands []Candidate, scanned int, conv uint64) Choice {
	if len(cands) == 0 {
		return Choice{Index: -1}
	}
	least := cands[0].Load
	for _, c := range cands[1:] {
		least = min(least, c.Load)
	}
	best, out := -1, OutcomeMiss
	for i := range cands {
		c := &cands[i]
		switch {
		case c.Prefix <= 0:
			continue
		case 2*c.Prefix < scanned:
			if out == OutcomeMiss {
				out = OutcomeShort
			}
			continue
		case c.Load > least+LoadBand:
			out = OutcomeBusy
			continue
		}
		if best < 0 || better(c, &cands[best], conv) {
			best = i
		}
	}
	if best >= 0 {
		return Choice{Index: best, Prefix: cands[best].Prefix, Outcome: OutcomeHit}
	}
	var bw uint64
	for i := range cands {
		if cands[i].Load > least+LoadBand {
			continue
		}
		if w := RendezvousWeight(conv, cands[i].Target); best < 0 || w > bw {
			best, bw = i, w
		}
	}
	return Choice{Index: best, Outcome: out}
}

// SelectPrint is Select for the request whose fingerprint is p, with one more rule: a hint
// that ends before p's conversation key does (Prefix < p.ConversationPrefix) covers only what
// conversations share (tools, a system prompt) and is dropped from cands before Select.
//
// Such a hint says which backends served other conversations under the same system prompt;
// following it would send every new conversation to them (and each gateway replica to the
// ones it happened to learn), where rendezvous hashing of the conversation key spreads new
// conversations evenly and sends a conversation's turns to the same backend from every
// replica. A shared prefix soon sits in every backend's cache anyway. When a dropped hint
// was the only one that covered half of the request, the outcome is OutcomeShared.
func SelectPrint(cands []Candidate, p *Print) Choice {
	shared := false
	for i := range cands {
		if c := &cands[i]; c.Prefix > 0 && c.Prefix < p.ConversationPrefix {
			shared = shared || 2*c.Prefix >= p.Scanned
			c.Prefix, c.Used = 0, 0
		}
	}
	ch := Select(cands, p.Scanned, p.Conversation)
	if shared && ch.Outcome == OutcomeMiss {
		ch.Outcome = OutcomeShared
	}
	return ch
}

// better reports whether a beats b among candidates with valid hints.
func better(a, b *Candidate, conv uint64) bool {
	switch {
	case a.Prefix != b.Prefix:
		return a.Prefix > b.Prefix
	case a.Load != b.Load:
		return a.Load < b.Load
	case a.Used != b.Used:
		return a.Used > b.Used
	}
	return RendezvousWeight(conv, a.Target) > RendezvousWeight(conv, b.Target)
}

// RendezvousWeight is the highest-random-weight score of target t for conversation key
// conv: a fixed function (no seed), so that every process ranks targets alike. The target
// with the highest weight wins; removing a target moves only the conversations it had.
func RendezvousWeight(conv uint64, t Target) uint64 {
	return fmix64(conv ^ fmix64(uint64(t)+0x9e3779b97f4a7c15))
}
