//! The gate of a fuzz campaign with several jobs (docs/live.md "Parallel
//! jobs and shards"): a reader-writer lock whose holders are admitted in
//! the order their tickets were handed out, not in the order they happen
//! to ask.
//!
//! `std::sync::RwLock` let a job that had just released the gate take it
//! again before the other job, woken by the release, was scheduled: under
//! load one job ran an epoch's alone cases and then the next epoch's shared
//! cases by itself while the other waited for its alone case for seconds
//! (issue 16's eighth round; `fuzz::Campaign::take` hands out the tickets
//! in the order it hands out the cases). Here a ticket is admitted only
//! when every earlier ticket that it cannot run beside has been admitted
//! and released:
//!
//! * an exclusive ticket when nobody holds the gate and no earlier ticket
//!   waits;
//! * a shared ticket of class `c` (a knob epoch) when nobody holds the gate
//!   exclusively, every holder is of class `c`, and no earlier ticket waits
//!   that is exclusive or of another class. The first holder of a stretch
//!   of class `c` runs its `first` step (setting the epoch's policy)
//!   holding the gate exclusively, before anyone of the class is admitted.
//!
//! A ticket handed out and never waited for (its case ran on the model
//! only, or failed before its live part) leaves the queue when dropped.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};

/// What a ticket asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// The gate alone.
    Exclusive,
    /// The gate beside other holders of the same class.
    Shared(u64),
}

#[derive(Default)]
struct State {
    /// The next ticket's number.
    next: u64,
    /// Tickets handed out and not admitted yet.
    pending: BTreeMap<u64, Want>,
    /// Holders of the gate shared, and their class.
    readers: usize,
    class: Option<u64>,
    /// The gate is held exclusively (or a stretch's first step runs).
    writer: bool,
}

impl State {
    fn admissible(&self, id: u64, want: Want) -> bool {
        if self.writer {
            return false;
        }
        let earlier = self.pending.range(..id).map(|(_, w)| *w);
        match want {
            Want::Exclusive => self.readers == 0 && self.pending.range(..id).next().is_none(),
            Want::Shared(c) => {
                (self.readers == 0 || self.class == Some(c))
                    && earlier.into_iter().all(|w| w == Want::Shared(c))
            }
        }
    }
}

/// A reader-writer gate that admits in ticket order ([module docs](self)).
#[derive(Default)]
pub(crate) struct TicketGate {
    st: Mutex<State>,
    cv: Condvar,
}

impl TicketGate {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place in the queue, after every ticket handed out before.
    pub(crate) fn ticket(&self, want: Want) -> Ticket<'_> {
        let mut st = self.lock();
        let id = st.next;
        st.next += 1;
        st.pending.insert(id, want);
        Ticket {
            gate: self,
            id,
            want,
            held: false,
        }
    }
}

/// A ticket of a [`TicketGate`]: waiting in its queue until
/// [`Ticket::wait`] admits it, then holding the gate until dropped.
pub(crate) struct Ticket<'a> {
    gate: &'a TicketGate,
    id: u64,
    want: Want,
    held: bool,
}

impl Ticket<'_> {
    /// What the ticket asks for.
    #[cfg(test)]
    pub(crate) fn want(&self) -> Want {
        self.want
    }

    /// Wait until admitted. A shared ticket that starts a stretch of its
    /// class runs `first` holding the gate exclusively, then holds it
    /// shared; an error from `first` leaves the gate and the queue (the
    /// ticket is spent).
    pub(crate) fn wait<E>(&mut self, first: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        if self.held {
            return Ok(());
        }
        let mut st = self.gate.lock();
        while !st.admissible(self.id, self.want) {
            st = self.gate.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.pending.remove(&self.id);
        match self.want {
            Want::Exclusive => {
                st.writer = true;
                self.held = true;
            }
            Want::Shared(c) if st.readers > 0 => {
                st.readers += 1;
                self.held = true;
                debug_assert_eq!(st.class, Some(c));
            }
            Want::Shared(c) => {
                st.writer = true;
                drop(st);
                let r = first();
                let mut st = self.gate.lock();
                st.writer = false;
                if r.is_ok() {
                    st.readers = 1;
                    st.class = Some(c);
                    self.held = true;
                }
                drop(st);
                self.gate.cv.notify_all();
                return r;
            }
        }
        Ok(())
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut st = self.gate.lock();
        if !self.held {
            st.pending.remove(&self.id);
        } else {
            match self.want {
                Want::Exclusive => st.writer = false,
                Want::Shared(_) => {
                    st.readers -= 1;
                    if st.readers == 0 {
                        st.class = None;
                    }
                }
            }
        }
        drop(st);
        self.gate.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn ok() -> Result<(), ()> {
        Ok(())
    }

    #[test]
    fn an_exclusive_ticket_waits_for_every_earlier_ticket_even_one_not_waiting_yet() {
        let gate = Arc::new(TicketGate::default());
        let first = gate.ticket(Want::Exclusive);
        let second = gate.ticket(Want::Exclusive);
        let order = Arc::new(Mutex::new(Vec::new()));
        std::thread::scope(|s| {
            let o = order.clone();
            let mut second = second;
            s.spawn(move || {
                second.wait(ok).unwrap();
                o.lock().unwrap().push(2);
            });
            // The second ticket asks first, the first one later: the first
            // is still admitted first.
            std::thread::sleep(Duration::from_millis(50));
            let mut first = first;
            first.wait(ok).unwrap();
            order.lock().unwrap().push(1);
            std::thread::sleep(Duration::from_millis(20));
            drop(first);
        });
        assert_eq!(*order.lock().unwrap(), vec![1, 2]);
    }

    #[test]
    fn a_job_that_releases_cannot_take_the_gate_before_the_next_ticket() {
        // The barging std's RwLock allowed: job A releases and asks again at
        // once; job B's earlier ticket must be served first.
        let gate = TicketGate::default();
        let mut a1 = gate.ticket(Want::Exclusive);
        a1.wait(ok).unwrap();
        let b = gate.ticket(Want::Exclusive);
        let order = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            let mut b = b;
            let order = &order;
            s.spawn(move || {
                b.wait(ok).unwrap();
                order.lock().unwrap().push("b");
                std::thread::sleep(Duration::from_millis(20));
            });
            std::thread::sleep(Duration::from_millis(20));
            drop(a1);
            let mut a2 = gate.ticket(Want::Exclusive);
            a2.wait(ok).unwrap();
            order.lock().unwrap().push("a2");
        });
        assert_eq!(*order.lock().unwrap(), vec!["b", "a2"]);
    }

    #[test]
    fn shared_tickets_of_one_class_run_together_and_a_class_change_waits() {
        let gate = TicketGate::default();
        let firsts = AtomicUsize::new(0);
        let mut r1 = gate.ticket(Want::Shared(3));
        let mut r2 = gate.ticket(Want::Shared(3));
        let first = || -> Result<(), ()> {
            firsts.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        r1.wait(first).unwrap();
        // Admitted beside r1 without a first step of its own.
        r2.wait(first).unwrap();
        assert_eq!(firsts.load(Ordering::SeqCst), 1);
        let next_class = gate.ticket(Want::Shared(4));
        let later_same = gate.ticket(Want::Shared(3));
        {
            let st = gate.lock();
            assert!(!st.admissible(next_class.id, Want::Shared(4)));
            // A later ticket of the running class does not pass the earlier
            // one of the next class.
            assert!(!st.admissible(later_same.id, Want::Shared(3)));
        }
        drop(r1);
        assert!(!gate.lock().admissible(next_class.id, Want::Shared(4)));
        drop(r2);
        assert!(gate.lock().admissible(next_class.id, Want::Shared(4)));
        let mut n = next_class;
        n.wait(first).unwrap();
        assert_eq!(firsts.load(Ordering::SeqCst), 2);
        drop(later_same);
        drop(n);
        let st = gate.lock();
        assert!(st.pending.is_empty() && st.readers == 0 && !st.writer);
    }

    #[test]
    fn an_exclusive_ticket_waits_for_readers_and_later_readers_wait_for_it() {
        let gate = TicketGate::default();
        let mut r = gate.ticket(Want::Shared(0));
        r.wait(ok).unwrap();
        let w = gate.ticket(Want::Exclusive);
        let r2 = gate.ticket(Want::Shared(0));
        assert!(!gate.lock().admissible(w.id, Want::Exclusive));
        assert!(!gate.lock().admissible(r2.id, Want::Shared(0)));
        drop(r);
        assert!(gate.lock().admissible(w.id, Want::Exclusive));
        let mut w = w;
        w.wait(ok).unwrap();
        assert!(!gate.lock().admissible(r2.id, Want::Shared(0)));
        drop(w);
        assert!(gate.lock().admissible(r2.id, Want::Shared(0)));
    }

    #[test]
    fn a_dropped_ticket_leaves_the_queue_and_a_failed_first_step_the_gate() {
        let gate = TicketGate::default();
        let never = gate.ticket(Want::Exclusive);
        let mut r = gate.ticket(Want::Shared(1));
        assert!(!gate.lock().admissible(r.id, Want::Shared(1)));
        drop(never);
        assert_eq!(
            r.wait(|| Err("cannot set the policy")),
            Err("cannot set the policy")
        );
        drop(r);
        let mut w = gate.ticket(Want::Exclusive);
        w.wait(ok).unwrap();
        let st = gate.lock();
        assert!(st.writer && st.readers == 0 && st.pending.is_empty());
    }

    #[test]
    fn many_jobs_never_hold_an_exclusive_gate_beside_anyone() {
        let gate = TicketGate::default();
        let inside = AtomicUsize::new(0);
        let excl = AtomicUsize::new(0);
        let take = Mutex::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let mut t = {
                            let mut n = take.lock().unwrap();
                            *n += 1;
                            let want = match *n % 5 {
                                0 => Want::Exclusive,
                                k => Want::Shared(*n / 7 + u64::from(k == 4)),
                            };
                            gate.ticket(want)
                        };
                        t.wait(ok).unwrap();
                        let is_excl = t.want() == Want::Exclusive;
                        if is_excl {
                            excl.fetch_add(1, Ordering::SeqCst);
                        }
                        let n = inside.fetch_add(1, Ordering::SeqCst);
                        assert!(!is_excl || n == 0, "exclusive beside another holder");
                        assert_eq!(excl.load(Ordering::SeqCst) - usize::from(is_excl), 0);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        if is_excl {
                            excl.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
    }
}
