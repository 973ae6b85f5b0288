package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sluice-gw/sluice/internal/steps"
)

// Position is a place in a configuration file: the file name as given to
// Load or LoadBytes, and a 1-based line and column (columns count bytes, as
// go-toml does). Line 0 means "somewhere in File" (for example a file that
// could not be read); the zero Position means "no file".
type Position struct {
	File string
	Line int
	Col  int
}

// String formats p as "file:line:col", "file" when Line is 0, or "-" for the
// zero Position.
func (p Position) String() string {
	switch {
	case p.File == "" && p.Line == 0:
		return "-"
	case p.Line == 0:
		return p.File
	default:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
	}
}

// IsValid reports whether p points at a line of a file.
func (p Position) IsValid() bool { return p.Line >= 1 }

// before orders positions by file name, then line, then column.
func (p Position) before(q Position) bool {
	if p.File != q.File {
		return p.File < q.File
	}
	if p.Line != q.Line {
		return p.Line < q.Line
	}
	return p.Col < q.Col
}

// Error is one problem found in a configuration, at the position of the key
// or value it concerns. Its text is "file:line:col: message", the format
// `sluice validate` prints one per line.
type Error struct {
	Pos Position
	Msg string
}

// Error returns "file:line:col: message".
func (e *Error) Error() string {
	return e.Pos.String() + ": " + e.Msg
}

// ErrorList is every problem Load found, sorted by position (file name, line,
// column). Load returns either nil or a non-empty ErrorList.
type ErrorList []*Error

// Error returns the errors one per line.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the individual errors, so that errors.As finds an *Error.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// Sort orders the list by position (file name, line, column); errors at the same position keep
// their order.
func (l ErrorList) Sort() {
	sort.SliceStable(l, func(i, j int) bool { return l[i].Pos.before(l[j].Pos) })
}

// errs collects errors while loading.
type errs struct {
	list  ErrorList
	at    map[Position]bool // the positions in list, for reported
	typed map[Position]bool // the positions of values of the wrong type (addType)
}

// addType records that the value at p has the wrong type. It is the one error reported at
// p: a check that runs later on the zero value left in its place would only add a false
// one (no entrypoint named "", health_check.path "" not absolute).
func (e *errs) addType(p Position, format string, args ...any) {
	e.add(p, format, args...)
	if e.typed == nil {
		e.typed = map[Position]bool{}
	}
	e.typed[p] = true
}

func (e *errs) add(p Position, format string, args ...any) {
	steps.Add(1)
	if e.typed[p] {
		return
	}
	e.list = append(e.list, &Error{Pos: p, Msg: fmt.Sprintf(format, args...)})
	if e.at == nil {
		e.at = map[Position]bool{}
	}
	e.at[p] = true
}

// reported reports whether an error was added at p: a value that failed to decode (its type)
// is left zero, and is not reported again as a bad value.
func (e *errs) reported(p Position) bool {
	steps.Add(1)
	return e.at[p]
}

// err returns the sorted list, or nil when there is none.
func (e *errs) err() error {
	if len(e.list) == 0 {
		return nil
	}
	e.list.Sort()
	return e.list
}
