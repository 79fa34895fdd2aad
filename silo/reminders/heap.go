package reminders

// dueHeap is a min-heap of reminders by due time, each knowing its index
// so that it can be moved or removed in O(log n). It is owned by the
// schedule. Written out rather than through container/heap, whose
// interface boxes every element.
type dueHeap []*reminder

func (h dueHeap) less(i, j int) bool { return h[i].due.Before(h[j].due) }

func (h dueHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

// min returns the reminder due first, or nil when the heap is empty.
func (h dueHeap) min() *reminder {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

// push adds r, which is not in the heap.
func (h *dueHeap) push(r *reminder) {
	r.idx = len(*h)
	*h = append(*h, r)
	h.up(r.idx)
}

// remove takes r out of the heap; r need not be in it.
func (h *dueHeap) remove(r *reminder) {
	i := r.idx
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	r.idx = -1
	if i != last {
		h.fix1(i)
	}
}

// fix restores the order after r's due time changed; r need not be in the
// heap.
func (h dueHeap) fix(r *reminder) {
	if r.idx >= 0 {
		h.fix1(r.idx)
	}
}

func (h dueHeap) fix1(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h dueHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down moves element i down to its place and reports whether it moved.
func (h dueHeap) down(i int) bool {
	start := i
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if r := c + 1; r < len(h) && h.less(r, c) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
