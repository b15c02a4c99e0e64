//! A rule regex's program and the matcher that runs it.
//!
//! The program is a Thompson NFA over characters, as `u32`s, compiled from
//! the parsed regex (`thompson.rs`, at build time for the rulesets compiled
//! into the worker, which `build.rs` writes out as arrays). Two matchers
//! run it, as the `regex` crate's own engines do, and find the match and
//! the capture groups the crate finds (leftmost-first: the earliest start,
//! then what a backtracking engine would try first) in time linear in the
//! value's length: a bounded backtracker (a depth-first search that
//! explores each (state, position) pair once) for values short enough
//! for its visited set, and a Pike VM (every thread in step over the
//! value's characters, in priority order) for longer ones. Their buffers
//! live in a per-thread cache, bounded by the program's size and the
//! visited set's, so a match allocates nothing once the cache has grown.
//!
//! Layout: a header (`HEADER` words: states, slots, flags, start state),
//! then three words per state (`[op, a, b]`), then the class ranges and
//! split targets the states point into.
//!
//! | op | a | b |
//! |---|---|---|
//! | `CHAR` | next | the character |
//! | `CLASS` (n ranges in op's upper bits) | next | offset of the ASCII characters it takes (128 bits as four words), then n (first, last) pairs, sorted |
//! | `SPLIT2` | preferred next | other next |
//! | `SPLITN` (n in op's upper bits) | offset of n next states, by preference | 0 |
//! | `SAVE` | next | slot (group `i` has slots `2i`, `2i + 1`) |
//! | `LOOK` | next | which assertion (`LOOK_*`) |
//! | `MATCH` | 0 | 0 |
//! | `FAIL` | 0 | 0 |

use std::cell::RefCell;

pub(crate) const OP_CHAR: u32 = 0;
pub(crate) const OP_CLASS: u32 = 1;
pub(crate) const OP_SPLIT2: u32 = 2;
pub(crate) const OP_SPLITN: u32 = 3;
pub(crate) const OP_SAVE: u32 = 4;
pub(crate) const OP_LOOK: u32 = 5;
pub(crate) const OP_MATCH: u32 = 6;
pub(crate) const OP_FAIL: u32 = 7;
/// The op's kind, in its low bits.
const OP_MASK: u32 = 0x7f;
/// Set on a state the NFA reaches by more than one edge (or the start):
/// the backtracker memoises only those. A state reached by one edge is
/// explored at most once per exploration of the state before it.
pub(crate) const OP_MARKED: u32 = 0x80;

/// `^` (of the value).
pub(crate) const LOOK_START: u32 = 0;
/// `$` (of the value).
pub(crate) const LOOK_END: u32 = 1;
/// `(?m)^`: the value's start or after `\n`.
pub(crate) const LOOK_START_LF: u32 = 2;
/// `(?m)$`: the value's end or before `\n`.
pub(crate) const LOOK_END_LF: u32 = 3;
/// `\b`, ASCII (as JavaScript's).
pub(crate) const LOOK_WORD: u32 = 4;
/// `\B`, ASCII.
pub(crate) const LOOK_NOT_WORD: u32 = 5;
/// `\b{start}`, ASCII.
pub(crate) const LOOK_WORD_START: u32 = 6;
/// `\b{end}`, ASCII.
pub(crate) const LOOK_WORD_END: u32 = 7;
/// `\b{start-half}`, ASCII.
pub(crate) const LOOK_WORD_START_HALF: u32 = 8;
/// `\b{end-half}`, ASCII.
pub(crate) const LOOK_WORD_END_HALF: u32 = 9;

/// Words before the first state.
pub(crate) const HEADER: usize = 4;
/// Flag: every match starts at the value's start, so only position 0 is
/// tried.
pub(crate) const FLAG_ANCHORED: u32 = 1;

/// The most (state, position) pairs the backtracker keeps a visited bit
/// for (32 KiB): longer values go to the Pike VM.
const MAX_VISITED: usize = 1 << 18;

/// A slot no match has set.
const NONE: u32 = u32::MAX;
/// Marks a stack entry that restores a slot rather than one that explores
/// a state.
const RESTORE: u32 = 1 << 31;

/// A program, checked by [`Program::new`]: every state, target, range and
/// slot it refers to is inside it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Program<'p>(&'p [u32]);

impl<'p> Program<'p> {
    /// `words` as a program, or `None` when they are not a well-formed one.
    pub(crate) fn new(words: &'p [u32]) -> Option<Program<'p>> {
        let [states, slots, _flags, start] = *words.get(..HEADER)? else {
            return None;
        };
        let states = states as usize;
        let body = HEADER.checked_add(states.checked_mul(3)?)?;
        if words.len() < body || start as usize >= states || slots % 2 != 0 || states >= 1 << 30 {
            return None;
        }
        let is_state = |s: u32| (s as usize) < states;
        let within = |off: u32, len: u32| {
            (off as usize)
                .checked_add(len as usize)
                .is_some_and(|end| off as usize >= body && end <= words.len())
        };
        let ok = words
            .get(HEADER..body)
            .unwrap_or_default()
            .chunks_exact(3)
            .all(|s| {
                let &[word, a, b] = s else {
                    return false;
                };
                let (op, n) = (word & OP_MASK, word >> 8);
                match op {
                    OP_CHAR => is_state(a),
                    OP_CLASS => is_state(a) && within(b, 4 + 2 * n),
                    OP_SPLIT2 => is_state(a) && is_state(b),
                    OP_SPLITN => {
                        within(a, n)
                            && words
                                .get(a as usize..)
                                .and_then(|w| w.get(..n as usize))
                                .is_some_and(|targets| targets.iter().all(|&t| is_state(t)))
                    }
                    OP_SAVE => is_state(a) && b < slots,
                    OP_LOOK => is_state(a) && b <= LOOK_WORD_END_HALF,
                    OP_MATCH | OP_FAIL => true,
                    _ => false,
                }
            });
        ok.then_some(Program(words))
    }

    /// `words`, checked by [`Program::new`] before.
    pub(crate) fn of(words: &'p [u32]) -> Program<'p> {
        Program(words)
    }

    // Every read below is checked although [`Program::new`] proved it in
    // bounds: a word that is not there reads as 0, a state as `FAIL`.

    /// Header word `i`.
    fn header(self, i: usize) -> u32 {
        self.0.get(i).copied().unwrap_or(0)
    }

    fn states(self) -> usize {
        self.header(0) as usize
    }

    /// Slots of every group, the whole match (0) included.
    pub(crate) fn slots(self) -> usize {
        self.header(1) as usize
    }

    fn anchored(self) -> bool {
        self.header(2) & FLAG_ANCHORED != 0
    }

    fn start(self) -> u32 {
        self.header(3)
    }

    // Always inlined, as `char_at` is: both run on every step, and at
    // `opt-level = "z"` a plain `#[inline]` is not taken
    // (docs/performance-ledger.md).
    #[inline(always)]
    fn state(self, sid: u32) -> (u32, u32, u32) {
        let at = HEADER + 3 * sid as usize;
        match self.0.get(at..at + 3) {
            Some(&[op, a, b]) => (op, a, b),
            _ => (OP_FAIL, 0, 0),
        }
    }

    /// Whether `haystack` has a match.
    pub(crate) fn is_match(self, haystack: &str) -> bool {
        with_cache(|cache| self.search(haystack, cache, 0, true))
    }

    /// Matches `haystack` and, if it matches, hands `found` every slot (a
    /// byte offset; `u32::MAX` for a group that took no part): group `i`
    /// spans `slots[2i]..slots[2i + 1]`. Returns whether it matched.
    pub(crate) fn captures(self, haystack: &str, found: impl FnOnce(&[u32])) -> bool {
        with_cache(|cache| {
            let slots = self.slots();
            let matched = self.search(haystack, cache, slots, false);
            if matched {
                found(cache.found.get(..slots).unwrap_or_default());
            }
            matched
        })
    }

    /// [`Program::captures`] by the Pike VM whatever the value's length,
    /// and whether the Pike VM's earliest search finds a match: so the
    /// tests hold both engines to the oracle.
    #[cfg(any(test, feature = "oracle"))]
    pub(crate) fn pike_captures(self, haystack: &str, found: impl FnOnce(&[u32])) -> (bool, bool) {
        with_cache(|cache| {
            cache.setup(0);
            let any = self.pike(haystack, cache, true);
            let slots = self.slots();
            cache.setup(slots);
            let matched = self.pike(haystack, cache, false);
            if matched {
                found(cache.found.get(..slots).unwrap_or_default());
            }
            (matched, any)
        })
    }

    /// Matches `haystack`, its match's slots (`stride` of them: none when
    /// only whether it matches is asked) left in `cache.found`.
    /// `earliest`: stop at the first match found (whether it matches, not
    /// where). A value short enough for a visited set of
    /// [`MAX_VISITED`] bits is matched by the backtracker, others by the
    /// Pike VM; both find the same match.
    fn search(self, haystack: &str, cache: &mut Cache, stride: usize, earliest: bool) -> bool {
        // Offsets are u32s (a rule value is far shorter).
        if haystack.len() >= (RESTORE - 1) as usize {
            return false;
        }
        cache.setup(stride);
        let positions = haystack.len() + 1;
        if self.states().saturating_mul(positions) <= MAX_VISITED {
            self.backtrack(haystack, cache)
        } else {
            self.pike(haystack, cache, earliest)
        }
    }

    /// The bounded backtracker: a depth-first search from each start
    /// position in turn, each state's alternatives in order of
    /// preference, so the first match it reaches is the leftmost-first
    /// one. A (state, position) pair is explored once per search: from
    /// there on, whether a match follows does not depend on how it was
    /// reached, so the time is linear in the value's length. Only marked
    /// states (`OP_MARKED`) keep a visited bit: every cycle has one, and an
    /// unmarked state is explored once per exploration of its one
    /// predecessor.
    fn backtrack(self, haystack: &str, cache: &mut Cache) -> bool {
        let bytes = haystack.as_bytes();
        let positions = bytes.len() + 1;
        let Cache {
            stack,
            scratch: slots,
            found,
            visited,
            ..
        } = cache;
        let words = (self.states() * positions).div_ceil(64);
        visited.clear();
        visited.resize(words, 0);
        let mut start = 0;
        loop {
            slots.fill(NONE);
            stack.push((self.start(), start as u32));
            while let Some((top, below)) = stack.pop() {
                if top & RESTORE != 0 {
                    if let Some(slot) = slots.get_mut((top & !RESTORE) as usize) {
                        *slot = below;
                    }
                    continue;
                }
                let (mut sid, mut at) = (top, below as usize);
                loop {
                    let (op, a, b) = self.state(sid);
                    if op & OP_MARKED != 0 {
                        let bit = sid as usize * positions + at;
                        let (word, mask) = (bit / 64, 1u64 << (bit % 64));
                        match visited.get_mut(word) {
                            Some(seen) if *seen & mask == 0 => *seen |= mask,
                            _ => break,
                        }
                    }
                    match op & OP_MASK {
                        OP_CHAR | OP_CLASS => {
                            let (c, width) = char_at(haystack, at);
                            let takes = if op & OP_MASK == OP_CHAR {
                                c == b
                            } else {
                                self.in_class(op, b, c)
                            };
                            if !takes {
                                break;
                            }
                            at += width;
                            sid = a;
                        }
                        OP_MATCH => {
                            found.copy_from_slice(slots);
                            return true;
                        }
                        _ => match self.follow((op, a, b), stack, slots, bytes, at) {
                            Some(next) => sid = next,
                            None => break,
                        },
                    }
                }
            }
            if self.anchored() || start >= bytes.len() {
                return false;
            }
            start += char_at(haystack, start).1;
        }
    }

    /// The Pike VM: threads in `cache.curr` in priority order, each at a
    /// state that takes a character (or matches), with its slots; a step
    /// moves those that take the next character to `cache.next`.
    fn pike(self, haystack: &str, cache: &mut Cache, earliest: bool) -> bool {
        let bytes = haystack.as_bytes();
        let stride = cache.found.len();
        cache.curr.setup(self.states(), stride);
        cache.next.setup(self.states(), stride);
        let Cache {
            curr,
            next,
            stack,
            scratch,
            found,
            ..
        } = cache;
        let anchored = self.anchored();
        let mut matched = false;
        let mut at = 0;
        loop {
            if curr.len == 0 && (matched || (anchored && at > 0)) {
                break;
            }
            // A new thread at each position, after (below) every thread
            // that started earlier: the search is unanchored unless the
            // regex is.
            if !matched && (!anchored || at == 0) {
                scratch.fill(NONE);
                self.closure(stack, scratch, curr, bytes, at, self.start());
            }
            let (c, width) = char_at(haystack, at);
            for &sid in curr.dense.get(..curr.len).unwrap_or_default() {
                let (op, a, b) = self.state(sid);
                let takes = match op & OP_MASK {
                    OP_CHAR => c == b,
                    OP_CLASS => self.in_class(op, b, c),
                    OP_MATCH => {
                        if earliest {
                            return true;
                        }
                        if let Some(row) = curr.row(sid) {
                            found.copy_from_slice(row);
                        }
                        matched = true;
                        // Every thread after this one has a lower priority.
                        break;
                    }
                    _ => false,
                };
                if let (true, Some(row)) = (takes, curr.row(sid)) {
                    scratch.copy_from_slice(row);
                    self.closure(stack, scratch, next, bytes, at + width, a);
                }
            }
            std::mem::swap(curr, next);
            next.len = 0;
            if at >= bytes.len() {
                break;
            }
            at += width;
        }
        matched
    }

    /// Adds `sid` and every state it reaches without taking a character at
    /// `at` to `threads`, in priority order; `slots` are the thread's, as
    /// the states on the way set them.
    fn closure(
        self,
        stack: &mut Vec<(u32, u32)>,
        slots: &mut [u32],
        threads: &mut Threads,
        bytes: &[u8],
        at: usize,
        sid: u32,
    ) {
        stack.push((sid, at as u32));
        while let Some((top, old)) = stack.pop() {
            if top & RESTORE != 0 {
                if let Some(slot) = slots.get_mut((top & !RESTORE) as usize) {
                    *slot = old;
                }
                continue;
            }
            let mut sid = top;
            while threads.insert(sid) {
                let (op, a, b) = self.state(sid);
                match op & OP_MASK {
                    OP_CHAR | OP_CLASS | OP_MATCH => {
                        if let Some(row) = threads.row_mut(sid) {
                            row.copy_from_slice(slots);
                        }
                        break;
                    }
                    _ => match self.follow((op, a, b), stack, slots, bytes, at) {
                        Some(next) => sid = next,
                        None => break,
                    },
                }
            }
        }
    }
}

/// The character at byte offset `at` (a character boundary) and its
/// length; `NONE` (which no state takes) and 0 at the end.
#[inline(always)]
fn char_at(haystack: &str, at: usize) -> (u32, usize) {
    match haystack.as_bytes().get(at) {
        None => (NONE, 0),
        Some(&b) if b < 0x80 => (u32::from(b), 1),
        Some(_) => {
            let c = haystack
                .get(at..)
                .and_then(|rest| rest.chars().next())
                .unwrap_or_default();
            (c as u32, c.len_utf8())
        }
    }
}

impl Program<'_> {
    /// Whether the class state `(op, _, at)` takes `c`.
    #[inline(always)]
    fn in_class(self, op: u32, at: u32, c: u32) -> bool {
        let at = at as usize;
        if c < 0x80 {
            self.0
                .get(at + (c as usize >> 5))
                .is_some_and(|word| word & (1 << (c & 31)) != 0)
        } else {
            self.0
                .get(at + 4..)
                .and_then(|rest| rest.get(..2 * (op >> 8) as usize))
                .is_some_and(|ranges| in_ranges(ranges, c))
        }
    }

    /// Follows `state`, one that takes no character, at `at`: the state
    /// to go on with (the preferred one of a split; the others are pushed
    /// onto `stack`, with `at`, to explore after it), or `None` when the
    /// thread ends here. A slot it sets is set in `slots`, its old value
    /// pushed to be restored.
    #[inline(always)]
    fn follow(
        self,
        (op, a, b): (u32, u32, u32),
        stack: &mut Vec<(u32, u32)>,
        slots: &mut [u32],
        bytes: &[u8],
        at: usize,
    ) -> Option<u32> {
        match op & OP_MASK {
            OP_SPLIT2 => {
                stack.push((b, at as u32));
                Some(a)
            }
            OP_SPLITN => {
                let targets = self.0.get(a as usize..)?.get(..(op >> 8) as usize)?;
                let (&first, others) = targets.split_first()?;
                for &t in others.iter().rev() {
                    stack.push((t, at as u32));
                }
                Some(first)
            }
            OP_SAVE => {
                if let Some(slot) = slots.get_mut(b as usize) {
                    stack.push((RESTORE | b, *slot));
                    *slot = at as u32;
                }
                Some(a)
            }
            OP_LOOK if look(b, bytes, at) => Some(a),
            _ => None,
        }
    }
}

/// Whether `c` is in the sorted (first, last) pairs of `ranges`.
#[inline]
fn in_ranges(ranges: &[u32], c: u32) -> bool {
    for range in ranges.chunks_exact(2) {
        let &[first, last] = range else {
            break;
        };
        if c < first {
            return false;
        }
        if c <= last {
            return true;
        }
    }
    false
}

/// Whether assertion `kind` holds at byte offset `at` (a character
/// boundary) of `bytes`.
fn look(kind: u32, bytes: &[u8], at: usize) -> bool {
    let word = |i: Option<usize>| {
        i.and_then(|i| bytes.get(i))
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    };
    let (before, after) = (word(at.checked_sub(1)), word(Some(at)));
    match kind {
        LOOK_START => at == 0,
        LOOK_END => at == bytes.len(),
        LOOK_START_LF => at
            .checked_sub(1)
            .is_none_or(|i| bytes.get(i) == Some(&b'\n')),
        LOOK_END_LF => bytes.get(at).is_none_or(|&b| b == b'\n'),
        LOOK_WORD => before != after,
        LOOK_NOT_WORD => before == after,
        LOOK_WORD_START => !before && after,
        LOOK_WORD_END => before && !after,
        LOOK_WORD_START_HALF => !before,
        LOOK_WORD_END_HALF => !after,
        _ => false,
    }
}

/// The threads at one position: a sparse set of states (in the order they
/// were added: priority) and each state's slots.
#[derive(Debug, Default)]
struct Threads {
    dense: Vec<u32>,
    sparse: Vec<u32>,
    len: usize,
    slots: Vec<u32>,
    stride: usize,
}

impl Threads {
    fn setup(&mut self, states: usize, stride: usize) {
        if self.sparse.len() < states {
            self.sparse.resize(states, 0);
            self.dense.resize(states, 0);
        }
        if self.slots.len() < states * stride {
            self.slots.resize(states * stride, NONE);
        }
        self.stride = stride;
        self.len = 0;
    }

    /// Adds `sid`; `false` when it was there.
    #[inline]
    fn insert(&mut self, sid: u32) -> bool {
        let Some(position) = self.sparse.get_mut(sid as usize) else {
            return false;
        };
        let i = *position as usize;
        if i < self.len && self.dense.get(i) == Some(&sid) {
            return false;
        }
        let Some(free) = self.dense.get_mut(self.len) else {
            return false;
        };
        *free = sid;
        *position = self.len as u32;
        self.len += 1;
        true
    }

    fn row(&self, sid: u32) -> Option<&[u32]> {
        let start = sid as usize * self.stride;
        self.slots.get(start..start + self.stride)
    }

    fn row_mut(&mut self, sid: u32) -> Option<&mut [u32]> {
        let start = sid as usize * self.stride;
        self.slots.get_mut(start..start + self.stride)
    }
}

/// A search's buffers, kept between searches.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    curr: Threads,
    next: Threads,
    /// States to explore (a state and a position) and slots to restore
    /// (`RESTORE` and the slot, its old value).
    stack: Vec<(u32, u32)>,
    /// The slots of the thread being followed.
    scratch: Vec<u32>,
    /// The slots of the best match so far.
    found: Vec<u32>,
    /// The backtracker's visited (state, position) pairs.
    visited: Vec<u64>,
}

impl Cache {
    const fn new() -> Cache {
        const fn threads() -> Threads {
            Threads {
                dense: Vec::new(),
                sparse: Vec::new(),
                len: 0,
                slots: Vec::new(),
                stride: 0,
            }
        }
        Cache {
            curr: threads(),
            next: threads(),
            stack: Vec::new(),
            scratch: Vec::new(),
            found: Vec::new(),
            visited: Vec::new(),
        }
    }

    fn setup(&mut self, stride: usize) {
        self.stack.clear();
        self.scratch.clear();
        self.scratch.resize(stride, NONE);
        self.found.clear();
        self.found.resize(stride, NONE);
    }
}

/// Runs `f` with this thread's cache (a fresh one if it is in use: a
/// match inside a match's callback).
fn with_cache<T>(f: impl FnOnce(&mut Cache) -> T) -> T {
    thread_local! {
        static CACHE: RefCell<Cache> = const { RefCell::new(Cache::new()) };
    }
    CACHE.with(|cache| match cache.try_borrow_mut() {
        Ok(mut cache) => f(&mut cache),
        Err(_) => f(&mut Cache::default()),
    })
}
