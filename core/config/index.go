package config

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/sluice-gw/sluice/internal/steps"
)

// pathSep joins the segments of a key path in the position index. Array
// elements are segments too: "services\x1fllm\x1fload_balancer\x1fservers\x1f0\x1furl".
const pathSep = "\x1f"

func joinPath(path []string) string {
	n := len(path)
	for _, s := range path {
		n += len(s)
	}
	steps.Add(n)
	return strings.Join(path, pathSep)
}

// MaxKeyDepth is the deepest key path a document may have: table names, dotted key parts,
// array elements and inline tables together (sluice's own keys are at most 7 deep). Every
// prefix of a key path is indexed, so that without a bound a key of n parts would cost n²;
// a deeper document is refused.
const MaxKeyDepth = 32

// origin says how a key path came to exist, for the TOML rules on defining a
// key or table twice (TOML 1.0.0, "Keys" and "Table").
type origin uint8

const (
	originValue      origin = iota + 1 // key = value (not a table)
	originInline                       // key = { ... } (closed table)
	originDotted                       // a.b = 1 makes table a
	originHeader                       // [a] defines table a
	originImplicit                     // [a.b] makes table a
	originArrayTable                   // [[a]]
	originElement                      // an element of an array value or array of tables
)

// keyPlace is where one key path was defined.
type keyPlace struct {
	key    Position // the key's (last segment's) first byte
	val    Position // the value's first byte; == key for tables
	origin origin
	// mapped: the value is a one-line string whose bytes appear verbatim
	// between its quotes (no escapes, no ${...}), so byte i of the value is
	// at column val.Col+1+i.
	mapped bool
}

// indexer walks go-toml's unstable AST of one file and records the position
// of every key path, including array elements, and the first duplicate
// definition it meets.
type indexer struct {
	file   string
	data   []byte
	nl     []int // offsets of '\n'
	places map[string]keyPlace
	arrays map[string]int // resolved [[array table]] path -> elements so far
	table  []string       // resolved path of the current [table]
	dup    *Error
	deep   *Error           // the first key path deeper than MaxKeyDepth
	p      *unstable.Parser // the parser of data, while run walks its AST
}

func newIndexer(file string, data []byte) *indexer {
	ix := &indexer{file: file, data: data, places: map[string]keyPlace{}, arrays: map[string]int{}}
	steps.Add(len(data))
	for i, c := range data {
		if c == '\n' {
			ix.nl = append(ix.nl, i)
		}
	}
	return ix
}

// pos converts a byte offset to a position; columns count bytes from 1.
func (ix *indexer) pos(off int) Position {
	line := sort.SearchInts(ix.nl, off) // newlines strictly before off
	start := 0
	if line > 0 {
		start = ix.nl[line-1] + 1
	}
	return Position{File: ix.file, Line: line + 1, Col: off - start + 1}
}

func (ix *indexer) rangePos(r unstable.Range, fallback Position) Position {
	if r.Length == 0 {
		return fallback
	}
	return ix.pos(int(r.Offset))
}

// run parses the whole document. It returns the parser's syntax error, if
// any (go-toml has already reported those with positions, so it is a backstop).
func (ix *indexer) run() error {
	var p unstable.Parser
	p.Reset(ix.data)
	ix.p = &p
	defer func() { ix.p = nil }()
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.KeyValue:
			ix.keyValue(ix.table, e, originValue)
		case unstable.Table:
			ix.header(e, false)
		case unstable.ArrayTable:
			ix.header(e, true)
		}
	}
	return p.Error()
}

// tooDeep records a key path deeper than MaxKeyDepth at at.
func (ix *indexer) tooDeep(at Position) {
	if ix.deep == nil {
		ix.deep = &Error{Pos: at, Msg: "key nested deeper than " + strconv.Itoa(MaxKeyDepth) +
			" levels (table names, dotted key parts, arrays and inline tables together)"}
	}
}

func (ix *indexer) conflict(path []string, at Position, first keyPlace) {
	if ix.dup != nil {
		return
	}
	what := "key " + dotted(path)
	if first.origin == originHeader || first.origin == originImplicit || first.origin == originArrayTable {
		what = "table [" + dotted(path) + "]"
	}
	ix.dup = &Error{Pos: at, Msg: what + " is already defined at " + first.key.String()}
}

// keyValue records `k1.k2.k3 = value` inside the table at base. It returns the offset just
// past the value, or -1 when that is not known.
func (ix *indexer) keyValue(base []string, e *unstable.Node, leafOrigin origin) int {
	path := append([]string(nil), base...)
	it := e.Key()
	var keyPos Position
	keyEnd := -1
	for it.Next() {
		k := it.Node()
		keyPos = ix.rangePos(k.Raw, Position{File: ix.file, Line: 1, Col: 1})
		keyEnd = -1
		if k.Raw.Length > 0 {
			keyEnd = int(k.Raw.Offset + k.Raw.Length)
		}
		path = append(path, string(k.Data))
		if len(path) > MaxKeyDepth {
			ix.tooDeep(keyPos)
			return -1
		}
		if it.IsLast() {
			break
		}
		id := joinPath(path)
		if old, ok := ix.places[id]; ok {
			if old.origin != originDotted {
				ix.conflict(path, keyPos, old)
			}
			continue
		}
		ix.places[id] = keyPlace{key: keyPos, val: keyPos, origin: originDotted}
	}
	v := e.Value()
	id := joinPath(path)
	if old, ok := ix.places[id]; ok {
		ix.conflict(path, keyPos, old)
		return -1
	}
	o := leafOrigin
	if v.Kind == unstable.InlineTable {
		o = originInline
	}
	start := ix.valueStart(v, ix.afterEquals(keyEnd))
	valPos := keyPos
	if start >= 0 {
		valPos = ix.pos(start)
	}
	ix.places[id] = keyPlace{key: keyPos, val: valPos, origin: o, mapped: ix.verbatim(v)}
	return ix.value(path, v, start, valPos)
}

// value records the contents of inline tables and arrays at path; v starts at offset start
// (-1: not known) and at is its position. It returns the offset just past v, or -1 when that
// is not known.
func (ix *indexer) value(path []string, v *unstable.Node, start int, at Position) int {
	switch v.Kind {
	case unstable.InlineTable:
		end := -1
		if start >= 0 {
			end = start + 1
		}
		it := v.Children()
		for it.Next() {
			if c := it.Node(); c.Kind == unstable.KeyValue {
				end = ix.keyValue(path, c, originValue)
			}
		}
		return ix.closedBy(end, '}')
	case unstable.Array:
		if len(path) >= MaxKeyDepth {
			ix.tooDeep(at)
			return -1
		}
		end := -1
		if start >= 0 {
			end = start + 1
		}
		it := v.Children()
		i := 0
		for it.Next() {
			c := it.Node()
			if c.Kind == unstable.Comment {
				continue
			}
			ep := append(append([]string(nil), path...), strconv.Itoa(i))
			i++
			cs := ix.valueStart(c, end)
			vp := at // an element whose start is not known is reported at its array
			if cs >= 0 {
				vp = ix.pos(cs)
			}
			ix.places[joinPath(ep)] = keyPlace{key: vp, val: vp, origin: originElement}
			end = ix.value(ep, c, cs, vp)
		}
		return ix.closedBy(end, ']')
	}
	if v.Raw.Length > 0 {
		return int(v.Raw.Offset + v.Raw.Length)
	}
	if inData(v.Kind) {
		r := ix.p.Range(v.Data)
		return int(r.Offset + r.Length)
	}
	return -1
}

// inData reports whether go-toml's parser gives a value of kind k no Raw range but keeps its
// text as Data, a slice of the document: booleans and dates and times.
func inData(k unstable.Kind) bool {
	switch k {
	case unstable.Bool, unstable.DateTime, unstable.LocalDateTime, unstable.LocalDate, unstable.LocalTime:
		return true
	}
	return false
}

// valueStart returns the offset of v's first byte, or -1 when it is not known. go-toml's
// parser records where strings, numbers and inline tables start (Raw), and booleans and dates
// are slices of the document (Data); an array has neither, and starts at its '[', the first
// byte at or after from (-1: not known) that is not whitespace, a newline, a comment or a
// comma.
func (ix *indexer) valueStart(v *unstable.Node, from int) int {
	switch {
	case v.Raw.Length > 0:
		return int(v.Raw.Offset)
	case inData(v.Kind) && len(v.Data) > 0:
		return int(ix.p.Range(v.Data).Offset)
	case v.Kind != unstable.Array || from < 0:
		return -1
	}
	if off := ix.skipFill(from); off < len(ix.data) && ix.data[off] == '[' {
		return off
	}
	return -1
}

// afterEquals returns the offset just past the "=" that follows a key ending at off (TOML
// 1.0.0, "Keys": whitespace around it is ignored), or -1.
func (ix *indexer) afterEquals(off int) int {
	if off < 0 {
		return -1
	}
	for off < len(ix.data) && (ix.data[off] == ' ' || ix.data[off] == '\t') {
		off++
	}
	if off >= len(ix.data) || ix.data[off] != '=' {
		return -1
	}
	return off + 1
}

// closedBy returns the offset just past the closing byte (']' or '}') of an array or inline
// table whose last element or key/value ends at off (-1: not known), or -1.
func (ix *indexer) closedBy(off int, closing byte) int {
	if off < 0 {
		return -1
	}
	if off = ix.skipFill(off); off < len(ix.data) && ix.data[off] == closing {
		return off + 1
	}
	return -1
}

// skipFill returns the offset of the first byte at or after off that is not whitespace, a
// newline, a comment or a comma: what may separate the values of an array or inline table.
func (ix *indexer) skipFill(off int) int {
	from := off
	for off < len(ix.data) {
		switch ix.data[off] {
		case ' ', '\t', '\r', '\n', ',':
			off++
			continue
		case '#':
			for off < len(ix.data) && ix.data[off] != '\n' {
				off++
			}
			continue
		}
		break
	}
	steps.Add(off - from + 1)
	return off
}

// verbatim reports whether v is a one-line basic or literal string whose
// decoded bytes are exactly the bytes between its quotes, with no "${".
func (ix *indexer) verbatim(v *unstable.Node) bool {
	if v.Kind != unstable.String || v.Raw.Length < 2 || int(v.Raw.Offset+v.Raw.Length) > len(ix.data) {
		return false
	}
	raw := ix.data[v.Raw.Offset : v.Raw.Offset+v.Raw.Length]
	if q := raw[0]; q != '"' && q != '\'' || raw[len(raw)-1] != q || len(raw) >= 3 && raw[1] == q && raw[2] == q {
		return false
	}
	inner := raw[1 : len(raw)-1]
	return string(inner) == string(v.Data) && !strings.Contains(string(inner), "${")
}

// header records [a.b] (array false) or [[a.b]] (array true) and makes it
// the current table.
func (ix *indexer) header(e *unstable.Node, array bool) {
	var path []string
	it := e.Key()
	for it.Next() {
		k := it.Node()
		keyPos := ix.rangePos(k.Raw, Position{File: ix.file, Line: 1, Col: 1})
		path = append(path, string(k.Data))
		if len(path) >= MaxKeyDepth { // an [[array]] element adds a level
			ix.tooDeep(keyPos)
			return
		}
		id := joinPath(path)
		old, exists := ix.places[id]
		if !it.IsLast() {
			if !exists {
				ix.places[id] = keyPlace{key: keyPos, val: keyPos, origin: originImplicit}
			} else if old.origin == originValue || old.origin == originInline {
				ix.conflict(path, keyPos, old)
			}
			if n, ok := ix.arrays[id]; ok && n > 0 {
				path = append(path, strconv.Itoa(n-1))
			}
			continue
		}
		if array {
			if exists && old.origin != originArrayTable {
				ix.conflict(path, keyPos, old)
			}
			if !exists {
				ix.places[id] = keyPlace{key: keyPos, val: keyPos, origin: originArrayTable}
			}
			n := ix.arrays[id]
			ix.arrays[id] = n + 1
			path = append(path, strconv.Itoa(n))
			ix.places[joinPath(path)] = keyPlace{key: keyPos, val: keyPos, origin: originHeader}
			break
		}
		if exists {
			if old.origin != originImplicit {
				ix.conflict(path, keyPos, old)
			}
		}
		ix.places[id] = keyPlace{key: keyPos, val: keyPos, origin: originHeader}
	}
	ix.table = path
}

// dotted renders a key path as TOML would write it, quoting segments that
// are not bare keys.
func dotted(path []string) string {
	var b strings.Builder
	for i, s := range path {
		switch {
		case i >= 2 && isIndex(s): // an array element: servers[0]
			b.WriteString("[" + s + "]")
			continue
		case i > 0:
			b.WriteByte('.')
		}
		if isBareKey(s) {
			b.WriteString(s)
		} else {
			b.WriteString(strconv.Quote(s))
		}
	}
	return b.String()
}

func isBareKey(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// parseFile decodes one TOML document into generic values and indexes the
// position of every key. Syntax errors carry go-toml's DecodeError position;
// errors that go-toml reports without one (a key or table defined twice) are
// located by the indexer, or failing that by bisecting the document by lines.
func parseFile(file string, data []byte) (map[string]any, *indexer, *Error) {
	if off := invalidUTF8(data); off >= 0 {
		// Checked first, so that a file in another encoding (Latin-1, Windows-1252) is
		// reported as such, not as whatever go-toml makes of the byte where it stops.
		return nil, nil, &Error{Pos: bytePos(file, data, off), Msg: fmt.Sprintf("the file is not valid UTF-8: byte 0x%02X "+
			"(TOML 1.0.0: a TOML file must be a valid UTF-8 encoded Unicode document; save it as UTF-8)", data[off])}
	}
	var doc map[string]any
	err := toml.Unmarshal(data, &doc)
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if key, hint := syntaxHint(data, line); key != "" {
			msg = key + ": " + msg + hint
			if c, ok := controlChar(data, line); ok && strings.HasSuffix(de.Error(), "invalid UTF-8") {
				// The file is UTF-8 (checked above): go-toml says "invalid UTF-8" of a
				// control character in a string, which TOML allows only escaped.
				msg = key + fmt.Sprintf(": control character 0x%02X in a string (TOML 1.0.0: control characters other than tab must be escaped, as \\u%04X)", c, c)
			}
			if missingValue(data, line) {
				// go-toml reads the line's end as a number cut short ("incomplete number").
				msg = key + ": the value is missing after = (write one; a string is quoted, as in " + lastKeyPart(key) + ` = "text")`
			}
			if strings.HasSuffix(de.Error(), "value out of range") {
				// A number go-toml cannot hold: its strconv error is noise, and quoting the
				// number (syntaxHint's advice for a bad bare value) helps no integer key.
				msg = key + ": " + outOfRange(key)
			}
		}
		if h := unclosedString(de.Error()); h != "" {
			msg = h
			key, _ := syntaxHint(data, line)
			if key == "" {
				key = arrayKey(data, line)
			}
			if key != "" {
				msg = key + ": " + h
			}
		}
		return nil, nil, &Error{Pos: Position{File: file, Line: max(line, 1), Col: max(col, 1)}, Msg: msg}
	}
	ix := newIndexer(file, data)
	perr := ix.run()
	if ix.deep != nil {
		return nil, nil, ix.deep
	}
	if err == nil && perr == nil {
		return doc, ix, nil
	}
	if ix.dup != nil {
		return nil, nil, ix.dup
	}
	if err == nil {
		err = perr
	}
	return nil, nil, &Error{Pos: bisect(file, data), Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// invalidUTF8 returns the offset of the first byte of data that is not part of a valid UTF-8
// sequence, or -1.
func invalidUTF8(data []byte) int {
	steps.Add(len(data))
	if utf8.Valid(data) {
		return -1
	}
	for i := 0; i < len(data); {
		if data[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// bytePos is the position of byte off of data; columns count bytes.
func bytePos(file string, data []byte, off int) Position {
	steps.Add(off)
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	return Position{File: file, Line: line, Col: off - bytes.LastIndexByte(data[:off], '\n')}
}

// bisect finds the first line whose inclusion makes go-toml fail with an
// error that has no position (the defining expression of a duplicate).
func bisect(file string, data []byte) Position {
	var ends []int // offset just past each line
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	ends = append(ends, len(data))
	positionless := func(n int) bool {
		steps.Add(ends[n-1]) // parsing the first n lines again
		var doc map[string]any
		err := toml.Unmarshal(data[:ends[n-1]], &doc)
		var de *toml.DecodeError
		return err != nil && !errors.As(err, &de)
	}
	n := sort.Search(len(ends), func(i int) bool { return positionless(i + 1) }) + 1
	if n > len(ends) {
		n = 1
	}
	return Position{File: file, Line: n, Col: 1}
}

func isIndex(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

var (
	keyValueLine = regexp.MustCompile(`^\s*([A-Za-z0-9_-]+(?:\s*\.\s*[A-Za-z0-9_-]+)*)\s*=\s*(.*)$`)
	headerLine   = regexp.MustCompile(`^\s*\[\[?\s*([A-Za-z0-9_.\s-]+?)\s*\]\]?\s*(?:#.*)?$`)
	bareDuration = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|µs|ms|s|m|h))+$`)
	spaceAtDot   = regexp.MustCompile(`\s*\.\s*`)
)

// syntaxHint names the key written on the given line of data (1-based) when the line is a
// key = value, so that a syntax error says which key it is about, and says what to write when
// the value is bare text that TOML cannot read: strings (durations among them) are quoted.
// It reads the text line by line, so for a line inside a multi-line string or array it may
// name no key; the error's position is exact either way.
func syntaxHint(data []byte, line int) (key, hint string) {
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return "", ""
	}
	m := keyValueLine.FindStringSubmatch(lines[line-1])
	if m == nil {
		return "", ""
	}
	local := spaceAtDot.ReplaceAllString(m[1], ".")
	key = local
	for i := line - 2; i >= 0; i-- {
		if h := headerLine.FindStringSubmatch(lines[i]); h != nil {
			key = spaceAtDot.ReplaceAllString(h[1], ".") + "." + local
			break
		}
	}
	value := strings.TrimSpace(m[2])
	if value == "" || strings.ContainsAny(value[:1], "\"'[{") {
		return key, ""
	}
	if i := strings.Index(value, "#"); i >= 0 {
		value = strings.TrimSpace(value[:i])
	}
	var probe map[string]any
	if value == "" || toml.Unmarshal([]byte("v = "+value), &probe) == nil {
		return key, "" // the value is fine: the error is elsewhere on the line
	}
	if bareDuration.MatchString(value) {
		return key, fmt.Sprintf(" (a duration is a string: write %s = %q)", local, value)
	}
	return key, fmt.Sprintf(" (a string is quoted: write %s = %q)", local, value)
}

// missingValue reports whether the given line of data (1-based) is a key = with nothing but
// blanks or a comment after the =.
func missingValue(data []byte, line int) bool {
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return false
	}
	m := keyValueLine.FindStringSubmatch(strings.TrimSuffix(lines[line-1], "\r"))
	if m == nil {
		return false
	}
	value := strings.TrimSpace(m[2])
	return value == "" || value[0] == '#'
}

// lastKeyPart is the last dotted part of key.
func lastKeyPart(key string) string { return key[strings.LastIndexByte(key, '.')+1:] }

// unclosedString rewords go-toml's errors for a string whose closing quote is missing (it
// reports the line end, or the file's end, that the string ran into), or returns "".
func unclosedString(err string) string {
	switch {
	case strings.HasSuffix(err, "basic strings cannot have new lines"), strings.HasSuffix(err, `basic string not terminated by "`):
		return `the string is not closed on its line: end it with " (a " inside it is written \"; text over several lines goes between """ and """)`
	case strings.HasSuffix(err, "literal strings cannot have new lines"), strings.HasSuffix(err, "unterminated literal string"):
		return `the string is not closed on its line: end it with ' (text over several lines goes between ''' and ''')`
	}
	return ""
}

// arrayKey returns the dotted key of the array a line (1-based) of data is inside of, when the
// array opens on an earlier line (`servers = [`), or "": the key that line's value belongs to.
func arrayKey(data []byte, line int) string {
	lines := strings.Split(string(data), "\n")
	for i := min(line, len(lines)) - 2; i >= 0; i-- {
		if headerLine.MatchString(lines[i]) {
			return ""
		}
		m := keyValueLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if v := strings.TrimSpace(m[2]); !strings.HasPrefix(v, "[") || strings.HasSuffix(v, "]") {
			return "" // a value of its own, or an array closed on its line
		}
		key, _ := syntaxHint(data, i+1)
		return key
	}
	return ""
}

// controlChar returns the first control character TOML forbids unescaped in a string (all
// below 0x20 but tab, and DEL) on line (1-based) of data.
func controlChar(data []byte, line int) (byte, bool) {
	lines := bytes.Split(data, []byte("\n"))
	if line < 1 || line > len(lines) {
		return 0, false
	}
	for _, c := range bytes.TrimSuffix(lines[line-1], []byte("\r")) {
		if (c < 0x20 && c != '\t') || c == 0x7F {
			return c, true
		}
	}
	return 0, false
}

// outOfRange is the message for a number too large for TOML (a 64-bit integer, or a float
// past ±1.8e308) at the dotted key: what the key takes, when it is an integer key the loader
// bounds.
func outOfRange(key string) string {
	msg := "the number is too large for TOML (64-bit integers, double-precision floats)"
	if r := rangeOf(strings.Split(key, ".")); r != anyInt {
		msg += "; the key wants " + r.want()
	}
	return msg
}
