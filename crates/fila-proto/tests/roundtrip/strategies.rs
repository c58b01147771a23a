//! Generators of every request and answer the round trips use.

use bytes::Bytes;
use fila_proto::*;
use proptest::prelude::*;

pub fn s() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_*é -]{0,12}"
}

pub fn payload() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from)
}

pub fn queue_ref() -> impl Strategy<Value = QueueRef> {
    (s(), any::<bool>()).prop_map(|(name, dlq)| QueueRef { name, dlq })
}

pub fn patch() -> impl Strategy<Value = SettingsPatch> {
    (
        (
            any::<Option<u64>>(),
            any::<Option<u32>>(),
            any::<Option<u64>>(),
            any::<Option<u32>>(),
            any::<Option<u64>>(),
        ),
        (
            any::<Option<bool>>(),
            proptest::option::of(proptest::option::of(s())),
            any::<Option<u64>>(),
            any::<Option<u64>>(),
            any::<Option<u8>>(),
        ),
        (
            any::<Option<u64>>(),
            proptest::option::of(proptest::option::of(s())),
            pairs(),
            proptest::collection::vec(s(), 0..4),
        ),
        (
            any::<Option<u64>>(),
            any::<Option<bool>>(),
            any::<Option<bool>>(),
            any::<Option<u8>>(),
            any::<Option<u32>>(),
        ),
        (
            any::<Option<u64>>(),
            any::<Option<u32>>(),
            any::<Option<u64>>(),
            any::<Option<u8>>(),
            any::<Option<u32>>(),
        ),
    )
        .prop_map(
            |((a, b, c, d, e), (f, g, h, i, j), (k, l, m, n), (o, p, q, r, t), (u, v, x, y, z))| {
                SettingsPatch {
                    visibility_timeout_ms: a,
                    max_deliveries: b,
                    retention_ms: c,
                    max_message_bytes: d,
                    receive_wait_default_ms: e,
                    dead_letter_on_expiration: f,
                    dead_letter_target: g,
                    max_messages: h,
                    max_bytes: i,
                    channel_capacity_pct: j,
                    delay_ms: k,
                    redrive_allow: l,
                    tags_set: m,
                    tags_remove: n,
                    dedup_window_ms: o,
                    content_dedup: p,
                    ordered: q,
                    priority_levels: r,
                    priority_fairness: t,
                    retry_initial_ms: u,
                    retry_multiplier_pct: v,
                    retry_max_ms: x,
                    retry_jitter_pct: y,
                    attempt_history: z,
                }
            },
        )
}

pub fn settings() -> impl Strategy<Value = Settings> {
    (
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
        ),
        (
            any::<bool>(),
            proptest::option::of(s()),
            any::<u64>(),
            any::<u64>(),
            any::<u8>(),
        ),
        (any::<u64>(), proptest::option::of(s()), pairs()),
        (
            any::<u64>(),
            any::<bool>(),
            any::<bool>(),
            any::<u8>(),
            any::<u32>(),
        ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u8>(),
            0u8..4,
            any::<u32>(),
        ),
    )
        .prop_map(
            |((a, b, c, d, e), (f, g, h, i, j), (k, l, m), (n, o, p, q, r), (t, u, v, x, y, z))| {
                Settings {
                    visibility_timeout_ms: a,
                    max_deliveries: b,
                    retention_ms: c,
                    max_message_bytes: d,
                    receive_wait_default_ms: e,
                    dead_letter_on_expiration: f,
                    dead_letter_target: g,
                    max_messages: h,
                    max_bytes: i,
                    channel_capacity_pct: j,
                    delay_ms: k,
                    redrive_allow: l,
                    tags: m,
                    dedup_window_ms: n,
                    content_dedup: o,
                    ordered: p,
                    priority_levels: q,
                    priority_fairness: r,
                    retry_initial_ms: t,
                    retry_multiplier_pct: u,
                    retry_max_ms: v,
                    retry_jitter_pct: x,
                    paused: Halves::of_bits(y).unwrap(),
                    attempt_history: z,
                }
            },
        )
}

pub fn pairs() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec((s(), s()), 0..4)
}

pub fn availability() -> impl Strategy<Value = Availability> {
    prop_oneof![
        Just(Availability::Now),
        any::<u64>().prop_map(Availability::DelayMs),
        any::<u64>().prop_map(Availability::At)
    ]
}

pub fn put_entry() -> impl Strategy<Value = PutEntry> {
    (
        payload(),
        pairs(),
        proptest::option::of(s()),
        availability(),
        any::<Option<u64>>(),
        proptest::option::of(s()),
        proptest::option::of(s()),
        any::<Option<u8>>(),
    )
        .prop_map(
            |(payload, attributes, channel, availability, ttl_ms, dedup_id, group, priority)| {
                PutEntry {
                    payload,
                    attributes,
                    channel,
                    availability,
                    ttl_ms,
                    dedup_id,
                    group,
                    priority,
                }
            },
        )
}

pub fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (s(), proptest::option::of(1u8..=VERSION)).prop_map(|(client, max_version)| {
            Request::Hello {
                client,
                max_version,
            }
        }),
        s().prop_map(|token| Request::Auth { token }),
        Just(Request::ServerStats),
        Just(Request::Reload),
        Just(Request::ClusterStatus),
        prop_oneof![
            (any::<u64>(), s(), s()).prop_map(|(id, peer, client)| ClusterChange::AddLearner {
                id,
                peer,
                client
            }),
            any::<u64>().prop_map(|id| ClusterChange::Promote { id }),
            any::<u64>().prop_map(|id| ClusterChange::Remove { id }),
            proptest::option::of(any::<u64>()).prop_map(|to| ClusterChange::TransferLeader { to }),
            (any::<u64>(), any::<u64>(), s(), s()).prop_map(|(from, to, peer, client)| {
                ClusterChange::Move {
                    from,
                    to,
                    peer,
                    client,
                }
            }),
        ]
        .prop_map(Request::ChangeCluster),
        (s(), patch()).prop_map(|(name, settings)| Request::CreateQueue { name, settings }),
        s().prop_map(|name| Request::GetQueue { name }),
        (s(), patch()).prop_map(|(name, settings)| Request::UpdateQueue { name, settings }),
        (s(), s(), any::<u16>()).prop_map(|(prefix, after, limit)| Request::ListQueues {
            prefix,
            after,
            limit
        }),
        (s(), any::<bool>()).prop_map(|(name, if_exists)| Request::DeleteQueue { name, if_exists }),
        queue_ref().prop_map(|queue| Request::Purge { queue }),
        s().prop_map(|name| Request::QueueStats { name }),
        (s(), proptest::collection::vec(put_entry(), 0..4))
            .prop_map(|(queue, messages)| Request::Put { queue, messages }),
        (s(), any::<u64>()).prop_map(|(queue, seq)| Request::CancelScheduled { queue, seq }),
        (
            queue_ref(),
            any::<u8>(),
            any::<Option<u64>>(),
            any::<Option<u64>>(),
            proptest::option::of(s()),
            0u8..16,
        )
            .prop_map(
                |(queue, max_messages, visibility_ms, wait_ms, channel, f)| {
                    Request::Receive(Receive {
                        queue,
                        max_messages,
                        visibility_ms,
                        wait_ms,
                        channel,
                        fields: Fields(f),
                    })
                }
            ),
        (
            queue_ref(),
            proptest::collection::vec((any::<[u8; 32]>(), any::<u64>()), 0..4)
        )
            .prop_map(|(queue, entries)| Request::UpdateVisibility { queue, entries }),
        (
            queue_ref(),
            proptest::collection::vec(any::<[u8; 32]>(), 0..4)
        )
            .prop_map(|(queue, receipts)| Request::Delete { queue, receipts }),
        (
            queue_ref(),
            proptest::collection::vec(any::<[u8; 32]>(), 0..4),
            s(),
            s()
        )
            .prop_map(|(queue, receipts, reason, description)| Request::Release {
                queue,
                receipts,
                reason,
                description
            }),
        (s(), 0u8..4).prop_map(|(name, h)| Request::PauseQueue {
            name,
            halves: Halves::of_bits(h).unwrap()
        }),
        (s(), 0u8..4).prop_map(|(name, h)| Request::ResumeQueue {
            name,
            halves: Halves::of_bits(h).unwrap()
        }),
        (s(), any::<[u8; 32]>()).prop_map(|(queue, receipt)| Request::Defer { queue, receipt }),
        (
            s(),
            proptest::collection::vec(any::<u64>(), 0..4),
            any::<Option<u64>>()
        )
            .prop_map(|(queue, seqs, visibility_ms)| Request::ReceiveDeferred {
                queue,
                seqs,
                visibility_ms
            }),
        (s(), any::<[u8; 32]>(), s(), s()).prop_map(|(queue, receipt, reason, description)| {
            Request::DeadLetter {
                queue,
                receipt,
                reason,
                description,
            }
        }),
        (queue_ref(), any::<u64>(), any::<u8>(), 0u8..32).prop_map(
            |(queue, from_seq, max_messages, f)| {
                Request::Peek {
                    queue,
                    from_seq,
                    max_messages,
                    fields: Fields(f),
                }
            }
        ),
        (
            s(),
            any::<Option<u64>>(),
            any::<Option<u32>>(),
            move_filter()
        )
            .prop_map(
                |(queue, max_messages, rate_per_second, filter)| Request::Redrive {
                    queue,
                    max_messages,
                    rate_per_second,
                    filter,
                }
            ),
        (
            s(),
            proptest::option::of(s()),
            any::<Option<u64>>(),
            any::<Option<u32>>(),
            move_filter()
        )
            .prop_map(|(queue, to, max_messages, rate_per_second, filter)| {
                Request::StartMove {
                    queue,
                    to,
                    max_messages,
                    rate_per_second,
                    filter,
                }
            }),
        (
            s(),
            any::<bool>(),
            any::<bool>(),
            move_filter(),
            any::<u64>()
        )
            .prop_map(|(queue, dlq, back_to_source, filter, from_seq)| {
                Request::PreviewMove {
                    queue,
                    dlq,
                    back_to_source,
                    filter,
                    from_seq,
                }
            }),
        (
            queue_ref(),
            any::<[u8; 32]>(),
            any::<u64>(),
            proptest::option::of(payload())
        )
            .prop_map(|(queue, receipt, timeout_ms, payload)| {
                Request::UpdateMessage {
                    queue,
                    receipt,
                    timeout_ms,
                    payload,
                }
            }),
        s().prop_map(|queue| Request::ListMoves { queue }),
        (s(), any::<u64>()).prop_map(|(queue, id)| Request::CancelMove { queue, id }),
        prop_oneof![
            (queue_ref(), any::<u64>()).prop_map(|(queue, seq)| Request::DeleteSeq { queue, seq }),
            (s(), any::<u64>(), s(), s()).prop_map(|(queue, seq, reason, description)| {
                Request::DeadLetterSeq {
                    queue,
                    seq,
                    reason,
                    description,
                }
            }),
            (s(), s(), any::<u16>()).prop_map(|(queue, after, limit)| Request::Channels {
                queue,
                after,
                limit
            }),
        ],
    ]
}

/// A move filter: empty a third of the time.
pub fn move_filter() -> impl Strategy<Value = MoveFilter> {
    prop_oneof![
        Just(MoveFilter::default()),
        (
            pairs(),
            proptest::option::of(s()),
            proptest::option::of(s()),
            any::<Option<u64>>(),
            any::<Option<u64>>()
        )
            .prop_map(
                |(attributes, reason, text, since_ms, until_ms)| MoveFilter {
                    attributes,
                    reason,
                    text,
                    since_ms,
                    until_ms,
                }
            ),
    ]
}

pub fn move_info() -> impl Strategy<Value = MoveInfo> {
    (
        (
            any::<u64>(),
            any::<bool>(),
            proptest::option::of(s()),
            any::<u32>(),
            any::<u64>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<Option<u64>>(),
            any::<u8>(),
            proptest::option::of(s()),
        ),
        move_filter(),
    )
        .prop_map(
            |(
                (id, from_dlq, to, rate_per_second, started_at_ms),
                (moved, to_move, max_messages, status, failure),
                filter,
            )| {
                MoveInfo {
                    id,
                    from_dlq,
                    to,
                    rate_per_second,
                    started_at_ms,
                    moved,
                    to_move,
                    max_messages,
                    status,
                    failure,
                    filter,
                }
            },
        )
}

pub fn wire_error() -> impl Strategy<Value = WireError> {
    (any::<u16>(), s()).prop_map(|(code, message)| WireError {
        code: ErrorCode(code),
        message,
    })
}

pub fn message() -> impl Strategy<Value = Message> {
    (
        (
            any::<u128>(),
            any::<u64>(),
            payload(),
            pairs(),
            proptest::option::of(s()),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u8>(),
            any::<Option<[u8; 32]>>(),
        ),
        proptest::option::of((s(), any::<u64>(), any::<u8>(), s(), s())),
        (proptest::option::of(s()), 1u8..=255),
    )
        .prop_map(
            |(
                (id, seq, payload, attributes, channel),
                (ins, exp, vis, count, state, receipt),
                dl,
                (group, priority),
            )| Message {
                id,
                seq,
                payload,
                attributes,
                channel,
                inserted_at_ms: ins,
                expires_at_ms: exp,
                next_visible_at_ms: vis,
                delivery_count: count,
                state,
                receipt,
                dead_letter: dl.map(
                    |(source_queue, at_ms, reason, consumer_reason, description)| DeadLetter {
                        source_queue,
                        at_ms,
                        reason,
                        consumer_reason,
                        description,
                        delivery_count: at_ms as u32,
                    },
                ),
                group,
                priority,
                attempts: Vec::new(),
            },
        )
}

pub fn entries<T: std::fmt::Debug + Clone>(
    v: impl Strategy<Value = T>,
) -> impl Strategy<Value = Vec<Entry<T>>> {
    proptest::collection::vec(
        prop_oneof![v.prop_map(Ok), wire_error().prop_map(Err)],
        0..4,
    )
}

/// `m` with the groups outside `f` zero or empty, as they decode (its
/// message group travels with its channel, in the attributes group).
pub fn only(mut m: Message, f: Fields) -> Message {
    if !f.contains(Fields::ID) {
        (m.id, m.seq) = (0, 0);
    }
    if !f.contains(Fields::ATTRIBUTES) {
        (m.attributes, m.channel, m.group, m.priority) = (Vec::new(), None, None, 1);
    }
    if !f.contains(Fields::TIMES) {
        (m.inserted_at_ms, m.expires_at_ms, m.next_visible_at_ms) = (0, 0, 0);
    }
    if !f.contains(Fields::DELIVERY) {
        (m.delivery_count, m.state, m.dead_letter) = (0, 0, None);
    }
    m
}

/// An answer and the opcode it answers.
pub fn response() -> impl Strategy<Value = (Opcode, Response)> {
    prop_oneof![
        (s(), any::<u8>(), any::<u32>()).prop_map(|(server, protocol_version, max_frame_len)| (
            Opcode::Hello,
            Response::Hello {
                server,
                protocol_version,
                max_frame_len
            }
        )),
        prop_oneof![
            Just(Opcode::Auth),
            Just(Opcode::DeleteQueue),
            Just(Opcode::Purge),
            Just(Opcode::CancelScheduled),
            Just(Opcode::Defer),
            Just(Opcode::DeadLetter),
            Just(Opcode::DeleteSeq),
            Just(Opcode::DeadLetterSeq),
            Just(Opcode::ChangeCluster)
        ]
        .prop_map(|op| (op, Response::Ok)),
        proptest::collection::vec((s(), any::<u64>()), 0..4)
            .prop_map(|p| (Opcode::ServerStats, Response::ServerStats(p))),
        (
            any::<u64>(),
            proptest::option::of(any::<u64>()),
            any::<u64>(),
            proptest::option::of(any::<u64>()),
            proptest::collection::vec(
                (
                    any::<u64>(),
                    s(),
                    s(),
                    any::<bool>(),
                    proptest::option::of(any::<u64>())
                ),
                0..4
            ),
            proptest::collection::vec(
                (
                    any::<u32>(),
                    proptest::option::of(any::<u64>()),
                    proptest::option::of(any::<u64>()),
                    proptest::collection::vec(
                        (
                            any::<u64>(),
                            any::<bool>(),
                            proptest::option::of(any::<u64>())
                        ),
                        0..4
                    )
                ),
                0..4
            )
        )
            .prop_map(|(node_id, leader, term, applied, members, partitions)| (
                Opcode::ClusterStatus,
                Response::ClusterStatus(Box::new(ClusterStatus {
                    node_id,
                    leader,
                    term,
                    last_log_index: applied.map(|a| a + 1),
                    committed_index: applied,
                    applied_index: applied,
                    members: members
                        .into_iter()
                        .map(
                            |(id, peer, client, voter, matched_index)| ClusterMemberStatus {
                                id,
                                peer,
                                client,
                                voter,
                                matched_index
                            }
                        )
                        .collect(),
                    partitions: partitions
                        .into_iter()
                        .map(|(partition, leader, applied, replicas)| PartitionStatus {
                            partition,
                            leader,
                            term: partition.into(),
                            last_log_index: applied,
                            committed_index: applied.map(|a| a / 2),
                            applied_index: applied.map(|a| a / 3),
                            replicas: replicas
                                .into_iter()
                                .map(|(id, voter, matched_index)| ReplicaStatus {
                                    id,
                                    voter,
                                    matched_index,
                                })
                                .collect(),
                        })
                        .collect(),
                }))
            )),
        any::<bool>().prop_map(|c| (Opcode::CreateQueue, Response::Created(c))),
        (any::<u64>(), any::<u32>(), any::<bool>()).prop_map(|(generation, tokens, tls)| (
            Opcode::Reload,
            Response::Reloaded {
                generation,
                tokens,
                tls
            }
        )),
        (
            prop_oneof![Just(Opcode::GetQueue), Just(Opcode::UpdateQueue)],
            settings()
        )
            .prop_map(|(op, s)| (op, Response::Queue(Box::new(s)))),
        (
            proptest::collection::vec(s(), 0..4),
            proptest::option::of(s())
        )
            .prop_map(|(names, next)| (Opcode::ListQueues, Response::Queues { names, next })),
        proptest::collection::vec(any::<u64>(), 19).prop_map(|v| (
            Opcode::QueueStats,
            Response::Stats(Box::new(Stats {
                visible: v[0],
                in_flight: v[1],
                delayed: v[2],
                deferred: v[3],
                dead_lettered: v[4],
                bytes: v[5],
                oldest_age_ms: v[6],
                puts: v[7],
                deliveries: v[8],
                deletes: v[9],
                expiries: v[10],
                dead_letterings: v[11],
                redriven: v[12],
                created_at_ms: v[13],
                modified_at_ms: v[14],
                dedup_entries: v[15],
                groups: v[16],
                groups_in_flight: v[17],
                retries: v[18],
            }))
        )),
        entries((any::<u128>(), any::<u64>()).prop_map(|(id, seq)| PutAck { id, seq }))
            .prop_map(|e| (Opcode::Put, Response::Put(e))),
        (
            prop_oneof![Just(Opcode::Receive), Just(Opcode::Peek)],
            proptest::collection::vec(message(), 0..3)
        )
            .prop_map(|(op, m)| (op, Response::Messages(m))),
        (0u8..16, proptest::collection::vec(message(), 0..3)).prop_map(|(f, ms)| {
            let f = Fields(f);
            let ms = ms.into_iter().map(|m| only(m, f)).collect();
            (Opcode::Receive, Response::Selected(f, ms))
        }),
        entries(any::<u64>()).prop_map(|e| (Opcode::UpdateVisibility, Response::Visibility(e))),
        entries(Just(())).prop_map(|e| (Opcode::Delete, Response::Deleted(e))),
        entries(any::<u64>()).prop_map(|e| (Opcode::Release, Response::Released(e))),
        (
            prop_oneof![Just(Opcode::PauseQueue), Just(Opcode::ResumeQueue)],
            0u8..4
        )
            .prop_map(|(op, h)| (op, Response::Paused(Halves::of_bits(h).unwrap()))),
        entries(message()).prop_map(|e| (Opcode::ReceiveDeferred, Response::Deferred(e))),
        (any::<u64>(), any::<u64>()).prop_map(|(moved, scheduled)| (
            Opcode::Redrive,
            Response::Redrive { moved, scheduled }
        )),
        (
            prop_oneof![Just(Opcode::StartMove), Just(Opcode::CancelMove)],
            move_info()
        )
            .prop_map(|(op, m)| (op, Response::Move(Box::new(m)))),
        proptest::collection::vec(move_info(), 0..3)
            .prop_map(|ms| (Opcode::ListMoves, Response::Moves(ms))),
        (any::<Option<[u8; 32]>>(), any::<u64>()).prop_map(|(receipt, visible_at_ms)| (
            Opcode::UpdateMessage,
            Response::Updated {
                receipt,
                visible_at_ms
            }
        )),
        (
            any::<u64>(),
            any::<Option<u64>>(),
            proptest::collection::vec(message(), 0..3)
        )
            .prop_map(|(matched, next, messages)| (
                Opcode::PreviewMove,
                Response::Preview {
                    matched,
                    next,
                    messages
                }
            )),
        (
            proptest::collection::vec(
                (proptest::option::of(s()), any::<u64>(), any::<u64>()).prop_map(
                    |(name, visible, held)| ChannelInfo {
                        name,
                        visible,
                        held
                    }
                ),
                0..4
            ),
            proptest::option::of(s())
        )
            .prop_map(|(channels, next)| (Opcode::Channels, Response::Channels { channels, next })),
        (proptest::sample::select(Opcode::ALL.to_vec()), wire_error())
            .prop_map(|(op, e)| (op, Response::Error(e))),
    ]
}
