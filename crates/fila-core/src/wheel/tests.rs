use super::*;
use std::collections::BTreeMap;

fn fire(wheel: &mut TimingWheel<u64>, now: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    wheel.advance(now, &mut out);
    out.sort_unstable();
    out
}

#[test]
fn fires_at_the_deadline_not_before() {
    let mut w = TimingWheel::new(1_000);
    w.insert(1_005, 1);
    w.insert(1_000 + 70, 2);
    w.insert(1_000 + 5_000, 3);
    assert_eq!(fire(&mut w, 1_004), vec![]);
    assert_eq!(fire(&mut w, 1_005), vec![(1_005, 1)]);
    assert_eq!(fire(&mut w, 1_069), vec![]);
    assert_eq!(fire(&mut w, 1_070), vec![(1_070, 2)]);
    assert_eq!(fire(&mut w, 5_999), vec![]);
    assert_eq!(fire(&mut w, 6_000), vec![(6_000, 3)]);
    assert!(w.is_empty());
}

#[test]
fn a_past_deadline_fires_at_the_next_advance() {
    let mut w = TimingWheel::new(500);
    w.insert(10, 7);
    assert_eq!(w.next_deadline(), Some(500));
    assert_eq!(fire(&mut w, 500), vec![(10, 7)]);
}

#[test]
fn cancel_and_reset() {
    let mut w = TimingWheel::new(0);
    let a = w.insert(100, 1);
    let b = w.insert(100, 2);
    let c = w.insert(200_000, 3);
    assert_eq!(w.cancel(a), 1);
    w.reset(c, 50);
    assert_eq!(fire(&mut w, 60), vec![(50, 3)]);
    w.reset(b, 1_000_000);
    assert_eq!(fire(&mut w, 999_999), vec![]);
    assert_eq!(fire(&mut w, 1_000_000), vec![(1_000_000, 2)]);
}

#[test]
fn deadlines_beyond_the_range_still_fire() {
    let mut w = TimingWheel::new(0);
    w.insert(RANGE * 3 + 17, 1);
    assert_eq!(fire(&mut w, RANGE * 3 + 16), vec![]);
    assert_eq!(fire(&mut w, RANGE * 3 + 17), vec![(RANGE * 3 + 17, 1)]);
}

#[test]
fn far_deadlines_near_a_window_edge() {
    let mut w = TimingWheel::new(RANGE - 5);
    let d = RANGE - 5 + RANGE - 2;
    w.insert(d, 1);
    w.insert(RANGE + 1, 2);
    assert_eq!(fire(&mut w, RANGE + 1), vec![(RANGE + 1, 2)]);
    assert_eq!(fire(&mut w, d - 1), vec![]);
    assert_eq!(fire(&mut w, d), vec![(d, 1)]);
}

#[test]
fn next_deadline_is_a_lower_bound() {
    let mut w = TimingWheel::new(0);
    w.insert(10_000, 1);
    let hint = w.next_deadline().unwrap();
    assert!(hint <= 10_000);
    assert_eq!(fire(&mut w, hint.saturating_sub(1)), vec![]);
}

/// Random inserts, cancels and advances against a BTreeMap.
#[test]
fn matches_a_btreemap() {
    let mut x: u64 = 0xDEAD_BEEF_CAFE_F00D;
    let mut rand = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for round in 0..20 {
        let mut now = rand(1 << 40);
        let mut w = TimingWheel::new(now);
        let mut model: BTreeMap<(u64, u64), TimerKey> = BTreeMap::new();
        for id in 0..5_000u64 {
            match rand(12) {
                0..=2 => {
                    let spans = [10, 100, 5_000, 400_000, 100_000_000, RANGE * 2];
                    let deadline = now + rand(spans[(id % 6) as usize]);
                    let key = w.insert(deadline, id);
                    model.insert((deadline, id), key);
                }
                3..=5 => {
                    // Streams of a few delays (lanes), and one-off ones.
                    let delays = [0, 5, 300, 70_000, 3_000_000, RANGE + 9];
                    let delay = match rand(8) {
                        0 => rand(1 << 20),
                        k => delays[(k % 6) as usize],
                    };
                    let key = w.insert_in_lane(now + delay, delay, id);
                    model.insert((now + delay, id), key);
                }
                6 => {
                    if let Some((&k, &key)) =
                        model.iter().nth(rand(model.len() as u64 + 1) as usize)
                    {
                        let deadline = now + rand(100_000);
                        w.reset(key, deadline);
                        model.remove(&k);
                        model.insert((deadline, k.1), key);
                    }
                }
                7 => {
                    if let Some((&k, &key)) =
                        model.iter().nth(rand(model.len() as u64 + 1) as usize)
                    {
                        assert_eq!(w.cancel(key), k.1);
                        model.remove(&k);
                    }
                }
                8 => {
                    // Moving far timers down ahead of time changes nothing
                    // that fires.
                    w.migrate(rand(64) as usize);
                    if let Some(m) = w.next_migration() {
                        assert!(m >= w.elapsed(), "a move is never wanted in the past");
                    }
                }
                _ => {
                    now += rand([3, 70, 9_000, 1_000_000][(id % 4) as usize]);
                    let got = fire(&mut w, now);
                    let mut want = Vec::new();
                    while let Some((&(d, v), _)) = model.first_key_value() {
                        if d > now {
                            break;
                        }
                        want.push((d, v));
                        model.pop_first();
                    }
                    assert_eq!(got, want, "round {round} at {now}");
                    if let Some(hint) = w.next_deadline() {
                        let first = model.first_key_value().unwrap().0 .0;
                        assert!(hint <= first, "hint {hint} after first deadline {first}");
                    }
                }
            }
            assert_eq!(w.len(), model.len());
        }
        assert!(w.lanes.len() > 1, "streams took lanes");
    }
}

/// A timer's entry is most of its memory (docs/benchmarks.md "Memory per
/// resident message"): with a 4-byte value, 24 bytes.
#[test]
fn an_entry_of_a_four_byte_timer_takes_24_bytes() {
    assert_eq!(std::mem::size_of::<Entry<u32>>(), 24);
}

#[test]
fn a_lane_fires_in_order_and_survives_cancelling_its_head() {
    let mut w = TimingWheel::new(0);
    // The first timer of a delay goes on the wheel; the second earns
    // the lane.
    let keys: Vec<TimerKey> = (0..6u64)
        .map(|i| w.insert_in_lane(i * 10 + 1_000, 1_000, i))
        .collect();
    assert_eq!(w.lanes_in_use(), 1);
    assert_eq!(w.cancel(keys[1]), 1, "the lane's head");
    assert_eq!(w.cancel(keys[3]), 3, "one behind the head");
    assert_eq!(fire(&mut w, 1_000), vec![(1_000, 0)]);
    // Timers of one lane due by the same advance all fire in it.
    assert_eq!(
        fire(&mut w, 1_050),
        vec![(1_020, 2), (1_040, 4), (1_050, 5)]
    );
    assert!(w.is_empty());
    assert_eq!(w.lanes_in_use(), 0);
}

#[test]
fn one_off_delays_never_take_a_lane_and_lanes_are_bounded() {
    let mut w = TimingWheel::new(0);
    for d in 1..=1_000u64 {
        w.insert_in_lane(d * 7, d * 7, d);
    }
    assert_eq!(w.lanes_in_use(), 0);
    for d in 1..=(LANES as u64 + 10) {
        w.insert_in_lane(d, d, d);
        w.insert_in_lane(d, d, d);
    }
    assert!(w.lanes_in_use() <= LANES);
    assert_eq!(w.len(), 1_000 + 2 * (LANES + 10));
}

/// A drained slot keeps room for its next timers when that room is small
/// (near slots refill at once) and frees it when large; `trim` frees all.
#[test]
fn a_drained_slot_keeps_small_room_and_frees_large_room() {
    let mut w = TimingWheel::new(0);
    // 3 000 timers in one slot of level 2 (65 536 ms wide; 200 000 ms is
    // beyond level 1's ring of 512 × 256 ms), 10 in one of level 1.
    for i in 0..3_000u64 {
        w.insert(200_000 + i % 50, i);
    }
    for i in 0..10u64 {
        w.insert(600 + i, i);
    }
    let (far, near) = (2 * RING as usize + 3, RING as usize + 2);
    assert_eq!(w.slots[far].len(), 3_000);
    assert_eq!(w.slots[near].len(), 10);
    assert_eq!(fire(&mut w, 700).len(), 10);
    assert!(w.slots[near].is_empty() && w.slots[near].capacity() >= 10);
    assert_eq!(fire(&mut w, 200_000 + 49).len(), 3_000);
    assert!(w.is_empty());
    assert_eq!(w.slots[far].capacity(), 0, "3 000 timers' room freed");
    w.trim();
    assert!(w.slots.iter().all(|s| s.capacity() == 0));
}

/// A cancel moves the slot's last timer into the cancelled one's place;
/// every timer left still fires, and the moved one can be cancelled too.
#[test]
fn cancelling_in_the_middle_of_a_slot_keeps_the_others() {
    let mut w = TimingWheel::new(0);
    let keys: Vec<TimerKey> = (0..5u64).map(|i| w.insert(100, i)).collect();
    assert_eq!(w.cancel(keys[1]), 1);
    assert_eq!(w.cancel(keys[4]), 4, "the one moved into 1's place");
    assert_eq!(w.cancel(keys[0]), 0);
    assert_eq!(fire(&mut w, 100), vec![(100, 2), (100, 3)]);
}

/// Level `n`'s ring holds two slots of level `n + 1`: a timer goes to the
/// lowest level that reaches it, so 511 ms ahead is level 0 and 512 ms
/// level 1, whatever the wheel's time within its slots.
#[test]
fn a_timer_goes_to_the_lowest_level_that_reaches_it() {
    for now in [0, 255, 256, 65_535, 65_536 + 100] {
        let mut w: TimingWheel<u64> = TimingWheel::new(now);
        let level_of = |w: &TimingWheel<u64>, k: TimerKey| {
            w.entries[k.index() as usize].place as usize / RING as usize
        };
        let a = w.insert(now + 511, 1);
        let b = w.insert(now + 512, 2);
        let c = w.insert(now + 60_000, 3);
        let d = w.insert(now + 200_000, 4);
        assert_eq!(level_of(&w, a), 0, "at {now}");
        assert_eq!(level_of(&w, b), 1, "at {now}");
        assert_eq!(level_of(&w, c), 1, "at {now}");
        assert_eq!(level_of(&w, d), 2, "at {now}");
    }
}

/// Runs `n` timers due uniformly `min..=max` ms after `start` out, 1 ms
/// at a time, moving far timers down `step` at a time after each advance
/// as an owner's turn does; checks each fires at its deadline. Answers the
/// most timers one advance moved, and how many were moved ahead of time.
fn run_out(n: u64, start: u64, min: u64, max: u64, step: usize) -> (u64, u64) {
    let mut w: TimingWheel<u64> = TimingWheel::new(start);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut deadlines = Vec::new();
    for i in 0..n {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let d = start + min + seed % (max - min + 1);
        w.insert(d, i);
        deadlines.push(d);
    }
    deadlines.sort_unstable();
    let mut fired = Vec::new();
    let (mut worst, mut early, mut count) = (0u64, 0u64, 0usize);
    for now in start + 1..=start + max {
        let before = w.moves();
        w.advance(now, &mut fired);
        worst = worst.max(w.moves() - before);
        fired.sort_unstable();
        for &(d, _) in &fired {
            assert_eq!(d, deadlines[count], "fired in deadline order");
            assert_eq!(d, now, "fired at its deadline");
            count += 1;
        }
        fired.clear();
        if step > 0 && w.next_migration().is_some_and(|m| m <= now) {
            let moved = w.migrate(step);
            assert!(moved <= step);
            early += moved as u64;
        }
    }
    assert_eq!(count as u64, n, "every timer fired");
    (worst, early)
}

/// What issue 38 found: leases spread uniformly over a minute sent about
/// half of them to one slot of level 2 (65.5 s wide) of the wheel as it
/// was (rings of 256 slots, levels chosen by the highest bit in which the
/// deadline differs from the time), and the advance at which that slot
/// came due moved them all down at once — 16–27 ms for a million, the
/// owner's loop stopped meanwhile. With rings of two slots of the level
/// above, a minute ahead is always within level 1's reach: no advance
/// moves more than one slot of level 1 (256 ms) holds.
#[test]
fn leases_over_a_minute_never_crowd_one_advance() {
    const N: u64 = 100_000;
    // 40 s into a slot of level 2: a third of the leases end past its end.
    let start: u64 = (1 << 16) * 1_000 + 40_000;
    // A slot of level 1 holds about N × 256 / 59 000 = 434 of them.
    let (worst, _) = run_out(N, start, 1_000, 60_000, 0);
    assert!(worst < 1_000, "an advance moved {worst} timers at once");
    let (worst, _) = run_out(N, start, 1_000, 60_000, 1_024);
    assert!(worst < 1_000, "an advance moved {worst} timers at once");
}

/// Longer leases (1–10 min) do crowd slots of level 2 (a quarter of them
/// each): moved down ahead of time, a bounded number per call, they leave
/// no advance more to move than a slot of level 1 holds; not moved ahead,
/// the slot's whole crowd is moved by one advance.
#[test]
fn a_crowded_far_slot_moves_down_ahead_of_time_in_bounded_steps() {
    const N: u64 = 100_000;
    let start: u64 = (1 << 16) * 1_000 + 40_000;
    let (worst, early) = run_out(N, start, 60_000, 600_000, 1_024);
    assert!(early > N / 2, "{early} of {N} timers moved ahead of time");
    // A slot of level 1 holds about N × 256 / 540 000 = 47 of them.
    assert!(worst < 1_000, "an advance moved {worst} timers at once");
    let (worst, _) = run_out(N, start, 60_000, 600_000, 0);
    assert!(
        worst > N / 20,
        "without moves ahead one advance moved {worst}"
    );
}

/// Without calls to `migrate` a far slot is drained when it comes due, as
/// before: moving ahead is an optimisation, never needed for correctness.
#[test]
fn a_far_slot_not_moved_ahead_still_fires_on_time() {
    let mut w: TimingWheel<u64> = TimingWheel::new(0);
    for i in 0..1_000u64 {
        w.insert(131_072 + i * 7, i);
    }
    assert!(w.next_migration().is_some());
    let mut fired = Vec::new();
    let mut count = 0u64;
    for now in 1..=131_072 + 7_000 {
        w.advance(now, &mut fired);
        for &(d, _) in &fired {
            assert_eq!(d, now);
            count += 1;
        }
        fired.clear();
    }
    assert_eq!(count, 1_000);
}

/// `next_migration` says when the wheel enters the slot before a far
/// timer's: an owner asleep until then wakes in time to move it.
#[test]
fn next_migration_is_when_a_far_slot_s_window_opens() {
    let mut w: TimingWheel<u64> = TimingWheel::new(0);
    w.insert(200_000, 1); // level 2, slot 3 (from 196 608 ms)
    assert_eq!(w.next_migration(), Some(2 << 16));
    let mut fired = Vec::new();
    w.advance(2 << 16, &mut fired);
    assert!(fired.is_empty());
    assert_eq!(w.next_migration(), Some(2 << 16));
    assert_eq!(w.migrate(10), 1);
    // Now on level 1, in its ring's upper half; level 0 takes it 256 ms
    // before its slot of level 1.
    let slot1 = 200_000u64 >> 8;
    assert_eq!(w.next_migration(), Some((slot1 - 1) << 8));
    for now in (2 << 16) + 1..=200_000 {
        w.advance(now, &mut fired);
        if w.next_migration().is_some_and(|m| m <= now) {
            w.migrate(10);
        }
    }
    assert_eq!(fired, vec![(200_000, 1)]);
    assert_eq!(w.next_migration(), None);
}
