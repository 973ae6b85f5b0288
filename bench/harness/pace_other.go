//go:build !linux

package harness

import "time"

// pacer falls back to time.Sleep where there is no timerfd: sends may then
// lag their intended time by up to a timer tick (reported as the send lag
// of the result).
type pacer struct{}

func newPacer() *pacer { return &pacer{} }

func (p *pacer) sleep(d time.Duration) { time.Sleep(d) }

func (p *pacer) close() {}
