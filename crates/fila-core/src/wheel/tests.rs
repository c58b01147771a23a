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
    // 3 000 timers in one slot of level 2 (65 536 ms wide), 10 in one of
    // level 1.
    for i in 0..3_000u64 {
        w.insert(70_000 + i % 50, i);
    }
    for i in 0..10u64 {
        w.insert(300 + i, i);
    }
    let (far, near) = (2 * SLOTS as usize + 1, SLOTS as usize + 1);
    assert_eq!(w.slots[far].len(), 3_000);
    assert_eq!(w.slots[near].len(), 10);
    assert_eq!(fire(&mut w, 400).len(), 10);
    assert!(w.slots[near].is_empty() && w.slots[near].capacity() >= 10);
    assert_eq!(fire(&mut w, 70_000 + 49).len(), 3_000);
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
