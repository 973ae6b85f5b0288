// Copyright (c) 2023 The Gnet Authors. All rights reserved.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//      http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//go:build (darwin || dragonfly || freebsd || linux || netbsd || openbsd) && !gc_opt

package gnet

import (
	"sync/atomic"

	"github.com/panjf2000/gnet/v2/internal/gfd"
)

// connMatrix holds a loop's connections in a slice indexed by descriptor: the lookup of
// every event is one bounds check and one load, where a map[int]*conn hashed the descriptor
// and probed its buckets (1.2% of the gateway's samples on 5,000 slow streams; see
// internal/gnet/PATCHES.md). Descriptors are small integers the kernel reuses lowest first,
// so the slice is as long as the largest descriptor the loop has held (8 bytes each); it does
// not shrink.
type connMatrix struct {
	connCount int32
	conns     []*conn
}

func (cm *connMatrix) init() {}

func (cm *connMatrix) iterate(f func(*conn) bool) {
	for _, c := range cm.conns {
		if c != nil {
			if !f(c) {
				return
			}
		}
	}
}

func (cm *connMatrix) incCount(_ int, delta int32) {
	atomic.AddInt32(&cm.connCount, delta)
}

func (cm *connMatrix) loadCount() (n int32) {
	return atomic.LoadInt32(&cm.connCount)
}

func (cm *connMatrix) addConn(c *conn, index int) {
	c.gfd = gfd.NewGFD(c.fd, index, 0, 0)
	cm.conns = growFor(cm.conns, c.fd)
	cm.conns[c.fd] = c
	cm.incCount(0, 1)
}

func (cm *connMatrix) delConn(c *conn) {
	if c.fd >= 0 && c.fd < len(cm.conns) {
		cm.conns[c.fd] = nil
	}
	cm.incCount(0, -1)
}

func (cm *connMatrix) getConn(fd int) *conn {
	if uint(fd) < uint(len(cm.conns)) {
		return cm.conns[fd]
	}
	return nil
}

/*
func (cm *connMatrix) getConnByGFD(fd gfd.GFD) *conn {
	return cm.getConn(fd.Fd())
}
*/
