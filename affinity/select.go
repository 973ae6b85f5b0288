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
	// OutcomeBehind: the only hints that cover half of the request end before its previous
	// turn does (SelectPrint): another router (a gateway replica) served the turns since,
	// and where is not known here; rendezvous hashing chose, as the other router's would.
	OutcomeBehind
)

var outcomeNames = [...]string{"none", "hit", "miss", "short", "busy", "shared", "behind"}

// String returns the outcome's metric label ("hit", "miss", "short", "busy", "shared",
// "behind", "none").
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
//   - Without one, the candidate with the highest rendezvous weight for conv
//     (RendezvousWeight) among those whose Load is within homeLimit (the load band, or
//     1.25× the mean load if that is more) wins: every gateway replica, without shared
//     state, sends a conversation to the same backend while the candidates agree and none
//     carries much more than its share.
func Select(cands []Candidate, scanned int, conv uint64) Choice {
	return choose(cands, scanned, conv, false)
}

// choose is Select; with opening set, a choice without a hint is made within the load band
// alone (see SelectPrint).
func choose(cands []Candidate, scanned int, conv uint64, opening bool) Choice {
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
	limit := least + LoadBand
	if !opening {
		limit = homeLimit(cands, least)
	}
	for i := range cands {
		if cands[i].Load > limit {
			continue
		}
		if w := RendezvousWeight(conv, cands[i].Target); best < 0 || w > bw {
			best, bw = i, w
		}
	}
	return Choice{Index: best, Outcome: out}
}

// SelectPrint is Select for the request whose fingerprint is p, with two more rules that
// drop hints from cands before Select:
//
//   - A hint that ends before p's conversation key does (Prefix < p.ConversationPrefix)
//     covers only what conversations share (tools, a system prompt). It says which backends
//     served other conversations under the same system prompt; following it would send every
//     new conversation to them (and each gateway replica to the ones it happened to learn),
//     where rendezvous hashing of the conversation key spreads new conversations evenly and
//     sends a conversation's turns to the same backend from every replica. A shared prefix
//     soon sits in every backend's cache anyway. When a dropped hint was the only one that
//     covered half of the request, the outcome is OutcomeShared.
//   - A hint that ends before the last checkpoint of the previous turn's request
//     (p.TurnPrefix) is out of date: the router that learned it did not serve that turn.
//     Behind a load balancer that spreads one conversation's turns over several gateway
//     replicas, each replica's index holds only its own turns; a replica that followed its
//     older hint would keep the conversation on the backend it chose before while the other
//     replicas send it elsewhere, and every turn would miss the turns the others served.
//     Rendezvous hashing chooses instead, the same backend every replica's rendezvous choice
//     names while their load bands agree. A router that served the previous turn itself
//     holds a hint at least that long and follows it. When a dropped hint was the only one
//     that covered half of the request, the outcome is OutcomeBehind.
//
// And one rule for the choice without a hint: a conversation's opening request (no
// assistant message yet, TurnPrefix 0) is placed by rendezvous hashing within the load band
// alone, not within the looser bound relative to the mean. Where a conversation opens decides
// where its later turns stay (they follow their hints while the backend stays in the band),
// so that bound would let backends keep up to a quarter more conversations than their share
// for their whole length. A replica that did not see the opening and places the next turn by
// the mean bound may choose another backend; that turn then misses only the opening's own
// message, as the shared prefix before it is cached everywhere.
func SelectPrint(cands []Candidate, p *Print) Choice {
	current := p.turnCheckpoint()
	shared, behind := false, false
	for i := range cands {
		c := &cands[i]
		switch {
		case c.Prefix <= 0:
			continue
		case c.Prefix < p.ConversationPrefix:
			shared = shared || 2*c.Prefix >= p.Scanned
		case c.Prefix < current:
			behind = behind || 2*c.Prefix >= p.Scanned
		default:
			continue
		}
		c.Prefix, c.Used = 0, 0
	}
	ch := choose(cands, p.Scanned, p.Conversation, p.TurnPrefix == 0)
	if ch.Outcome == OutcomeMiss {
		switch {
		case behind:
			ch.Outcome = OutcomeBehind
		case shared:
			ch.Outcome = OutcomeShared
		}
	}
	return ch
}

// Choose is the choice prefix affinity makes for the request whose fingerprint in scope s is
// p, among cands (their Target and Load set; Prefix and Used are overwritten): Lookup fills
// in each candidate's longest hint, then SelectPrint chooses. Every router that follows
// hints chooses through it (the model router's servers, the P/D prefill workers), so that a
// conversation finds its prefix by the same rules wherever it is served. It allocates
// nothing.
func (x *Index) Choose(s Scope, p *Print, cands []Candidate) Choice {
	x.Lookup(s, p, cands)
	return SelectPrint(cands, p)
}

// turnCheckpoint returns the prefix length of the last checkpoint within p.TurnPrefix (0:
// none): the longest prefix the previous turn's request and this one both marked.
func (p *Print) turnCheckpoint() int {
	at := 0
	for _, cp := range p.Checkpoints {
		if cp.Prefix > p.TurnPrefix {
			break
		}
		at = cp.Prefix
	}
	return at
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

// homeLimit is the most load (operations in flight) a candidate may carry and still be a
// conversation's rendezvous choice: the least load plus LoadBand, or 1.25 times the
// mean load counting the request being placed, rounded up, whichever is larger. The mean
// bound is consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
// "Consistent Hashing with Bounded Loads", SODA 2018, with 1+ε = 1.25): no backend
// takes a new conversation turn once it carries that much more than its share.
//
// Why not the load band alone: every gateway replica sees only its own requests in flight,
// a small and noisy share of each backend's load, and one operation above the least of such
// counts is a band the replicas' views often disagree on; each disagreement sends a turn of
// the conversation to a backend without its prefix. A bound relative to the mean moves far
// less with that noise, so the replicas' rendezvous choices agree while still keeping any
// backend within 1.25× the mean.
func homeLimit(cands []Candidate, least int) int {
	sum := 0
	for _, c := range cands {
		sum += c.Load
	}
	n := len(cands)
	bound := (homeLoadPercent*(sum+1) + 100*n - 1) / (100 * n)
	return max(least+LoadBand, bound)
}

// homeLoadPercent is how far above the mean load a conversation's rendezvous choice may be
// and still take its turn (see homeLimit), in hundredths: 125 is 1.25× the mean.
const homeLoadPercent = 125
