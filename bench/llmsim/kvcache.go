package llmsim

import "sync"

// kvCache is an instance's prefix KV cache: a set of block hashes with LRU eviction at a
// capacity in blocks. Blocks are found by chained hash, so a lookup counts the leading
// blocks of a prompt present in the cache (vLLM automatic prefix caching).
type kvCache struct {
	mu       sync.Mutex
	capacity int
	m        map[uint64]*kvBlock
	lru      kvBlock // sentinel: lru.next is the most recently used, lru.prev the least
	free     *kvBlock
	hits     int64 // tokens found (prefix_cache_hits)
	queries  int64 // tokens looked up (prefix_cache_queries)
}

type kvBlock struct {
	hash       uint64
	prev, next *kvBlock
}

func newKVCache(capacity int) *kvCache {
	c := &kvCache{capacity: capacity, m: make(map[uint64]*kvBlock, min(capacity, 1<<16))}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

func (c *kvCache) unlink(b *kvBlock) { b.prev.next, b.next.prev = b.next, b.prev }

func (c *kvCache) pushFront(b *kvBlock) {
	b.prev, b.next = &c.lru, c.lru.next
	c.lru.next.prev = b
	c.lru.next = b
}

// lookup returns how many leading blocks of hashes are cached, at most maxBlocks, marking
// them most recently used, and records promptTokens queried and the hit tokens.
func (c *kvCache) lookup(hashes []uint64, maxBlocks, blockTokens, promptTokens int) int {
	c.mu.Lock()
	n := 0
	for _, h := range hashes[:min(len(hashes), maxBlocks)] {
		b := c.m[h]
		if b == nil {
			break
		}
		c.unlink(b)
		c.pushFront(b)
		n++
	}
	c.queries += int64(promptTokens)
	c.hits += int64(n * blockTokens)
	c.mu.Unlock()
	return n
}

// insert adds the blocks (or refreshes them), evicting least recently used blocks beyond
// capacity.
func (c *kvCache) insert(hashes []uint64) {
	if c.capacity == 0 {
		return
	}
	c.mu.Lock()
	for _, h := range hashes {
		if b := c.m[h]; b != nil {
			c.unlink(b)
			c.pushFront(b)
			continue
		}
		var b *kvBlock
		if len(c.m) >= c.capacity {
			b = c.lru.prev
			c.unlink(b)
			delete(c.m, b.hash)
		} else if c.free != nil {
			b, c.free = c.free, c.free.next
		} else {
			b = new(kvBlock)
		}
		b.hash = h
		c.m[h] = b
		c.pushFront(b)
	}
	c.mu.Unlock()
}

// contains reports whether the block hash is cached, without touching the LRU.
func (c *kvCache) contains(h uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[h] != nil
}

// usage returns the blocks in use and the counters.
func (c *kvCache) usage() (used int, hits, queries int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.hits, c.queries
}

// reset drops every block (crash).
func (c *kvCache) reset() {
	c.mu.Lock()
	for h, b := range c.m {
		delete(c.m, h)
		b.next, b.prev = c.free, nil
		c.free = b
	}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	c.mu.Unlock()
}
