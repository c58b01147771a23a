//! An answer's bytes: encoding and decoding (the opcode is the request's).

use super::*;

impl Response {
    /// The answer, or the server's error as an `Err`.
    pub fn into_result(self) -> Result<Response, WireError> {
        match self {
            Response::Error(e) => Err(e),
            other => Ok(other),
        }
    }

    /// A receive's messages, whichever fields they carry.
    pub fn into_messages(self) -> Result<Vec<Message>, Response> {
        match self {
            Response::Messages(ms) | Response::Selected(_, ms) => Ok(ms),
            other => Err(other),
        }
    }

    /// Appends the whole frame of this answer to request `request_id` with
    /// opcode `opcode` to `buf`, in the newest protocol version.
    pub fn encode(&self, opcode: u8, request_id: u64, buf: &mut BytesMut) {
        self.encode_in(VERSION, opcode, request_id, buf)
    }

    /// [`Response::encode`] in protocol version `version` (one of those
    /// [`crate::speaks`]): version 1's settings are their first ten fields,
    /// its stats the first thirteen, and its messages carry no group key
    /// or priority level.
    pub fn encode_in(&self, version: u8, opcode: u8, request_id: u64, buf: &mut BytesMut) {
        let flags = match self {
            Response::Error(_) => flags::RESPONSE | flags::ERROR,
            Response::Selected(..) => flags::RESPONSE | flags::FIELDS,
            _ => flags::RESPONSE,
        };
        let start = begin_frame_in(version, buf, opcode, flags, request_id);
        let put_message = |w: &mut Writer<'_>, m: &Message| put_message_in(w, m, version);
        let w = &mut Writer(buf);
        match self {
            Response::Hello {
                server,
                protocol_version,
                max_frame_len,
            } => {
                w.str(server);
                w.u8(*protocol_version);
                w.u32(*max_frame_len);
            }
            Response::Ok => {}
            Response::ServerStats(pairs) => w.list(pairs, |w, (k, v)| {
                w.str(k);
                w.u64(*v);
            }),
            Response::ClusterStatus(c) => {
                w.u64(c.node_id);
                w.opt(&c.leader, |w, v| w.u64(*v));
                w.u64(c.term);
                for i in [&c.last_log_index, &c.committed_index, &c.applied_index] {
                    w.opt(i, |w, v| w.u64(*v));
                }
                w.list(&c.members, |w, m| {
                    w.u64(m.id);
                    w.str(&m.peer);
                    w.str(&m.client);
                    w.bool(m.voter);
                    w.opt(&m.matched_index, |w, v| w.u64(*v));
                });
                w.list(&c.partitions, |w, p| {
                    w.u32(p.partition);
                    w.opt(&p.leader, |w, v| w.u64(*v));
                    w.u64(p.term);
                    for i in [&p.last_log_index, &p.committed_index, &p.applied_index] {
                        w.opt(i, |w, v| w.u64(*v));
                    }
                    w.list(&p.replicas, |w, r| {
                        w.u64(r.id);
                        w.bool(r.voter);
                        w.opt(&r.matched_index, |w, v| w.u64(*v));
                    });
                });
            }
            Response::Reloaded {
                generation,
                tokens,
                tls,
            } => {
                w.u64(*generation);
                w.u32(*tokens);
                w.bool(*tls);
            }
            Response::Created(created) => w.bool(*created),
            Response::Queue(s) => put_settings_in(w, s, version),
            Response::Queues { names, next } => {
                w.list(names, |w, n| w.str(n));
                w.opt(next, |w, n| w.str(n));
            }
            Response::Stats(s) => {
                for v in [
                    s.visible,
                    s.in_flight,
                    s.delayed,
                    s.deferred,
                    s.dead_lettered,
                    s.bytes,
                    s.oldest_age_ms,
                    s.puts,
                    s.deliveries,
                    s.deletes,
                    s.expiries,
                    s.dead_letterings,
                    s.redriven,
                    s.created_at_ms,
                    s.modified_at_ms,
                    s.dedup_entries,
                    s.groups,
                    s.groups_in_flight,
                    s.retries,
                ]
                .into_iter()
                .take(match version {
                    1 => STATS_V1,
                    2 => STATS_V2,
                    _ => usize::MAX,
                }) {
                    w.u64(v);
                }
            }
            Response::Put(entries) => put_entries(w, entries, |w, a| {
                w.u128(a.id);
                w.u64(a.seq);
            }),
            Response::Messages(ms) => w.list(ms, put_message),
            Response::Selected(f, ms) => {
                w.u8(f.0);
                w.list(ms, |w, m| put_fields_in(w, m, *f, version));
            }
            Response::Visibility(entries) => put_entries(w, entries, |w, t| w.u64(*t)),
            Response::Deleted(entries) => put_entries(w, entries, |_, _| {}),
            Response::Updated {
                receipt,
                visible_at_ms,
            } => {
                w.opt(receipt, |w, r| w.array(r));
                w.u64(*visible_at_ms);
            }
            Response::Released(entries) => put_entries(w, entries, |w, t| w.u64(*t)),
            Response::Paused(halves) => w.u8(halves.bits()),
            Response::Deferred(entries) => put_entries(w, entries, put_message),
            Response::Redrive { moved, scheduled } => {
                w.u64(*moved);
                w.u64(*scheduled);
            }
            Response::Move(m) => put_move(w, m, version),
            Response::Moves(ms) => w.list(ms, |w, m| put_move(w, m, version)),
            Response::Preview {
                matched,
                next,
                messages,
            } => {
                w.u64(*matched);
                w.opt(next, |w, v| w.u64(*v));
                w.list(messages, |w, m| put_fields_in(w, m, Fields::KNOWN, version));
            }
            Response::Channels { channels, next } => {
                w.list(channels, |w, c| {
                    w.opt(&c.name, |w, n| w.str(n));
                    w.u64(c.visible);
                    w.u64(c.held);
                });
                w.opt(next, |w, n| w.str(n));
            }
            Response::Error(e) => put_error(w, e),
        }
        end_frame(buf, start);
    }

    /// Decodes an answer frame's body; its shape follows its opcode.
    pub fn decode(header: &FrameHeader, body: Bytes) -> Result<Response, ProtoError> {
        check_header(header)?;
        if !header.is_response() {
            return Err(ProtoError::Malformed("an answer has the response flag"));
        }
        let r = &mut Reader::new(body);
        if header.is_error() {
            if header.flags & flags::FIELDS != 0 {
                return Err(ProtoError::Malformed("an error answer has no fields flag"));
            }
            let e = get_error(r)?;
            r.finish()?;
            return Ok(Response::Error(e));
        }
        if header.flags & flags::FIELDS != 0 {
            if header.opcode != Opcode::Receive as u8 && header.opcode != Opcode::Peek as u8 {
                return Err(ProtoError::Malformed(
                    "only a receive's or a peek's answer has fields",
                ));
            }
            let f = match r.u8()? {
                m if m & !Fields::KNOWN.0 == 0 => Fields(m),
                _ => return Err(ProtoError::Malformed("unknown message fields")),
            };
            let ms = r.list(5, |r| get_fields(r, f))?;
            r.finish()?;
            return Ok(Response::Selected(f, ms));
        }
        let resp = match Opcode::from_u8(header.opcode)? {
            Opcode::Hello => Response::Hello {
                server: r.str()?,
                protocol_version: r.u8()?,
                max_frame_len: r.u32()?,
            },
            Opcode::Auth
            | Opcode::DeleteQueue
            | Opcode::Purge
            | Opcode::CancelScheduled
            | Opcode::Defer
            | Opcode::DeadLetter
            | Opcode::DeleteSeq
            | Opcode::DeadLetterSeq
            | Opcode::ChangeCluster => Response::Ok,
            Opcode::ServerStats => Response::ServerStats(r.list(10, |r| Ok((r.str()?, r.u64()?)))?),
            Opcode::ClusterStatus => Response::ClusterStatus(Box::new(ClusterStatus {
                node_id: r.u64()?,
                leader: r.opt(Reader::u64)?,
                term: r.u64()?,
                last_log_index: r.opt(Reader::u64)?,
                committed_index: r.opt(Reader::u64)?,
                applied_index: r.opt(Reader::u64)?,
                members: r.list(14, |r| {
                    Ok(ClusterMemberStatus {
                        id: r.u64()?,
                        peer: r.str()?,
                        client: r.str()?,
                        voter: r.bool()?,
                        matched_index: r.opt(Reader::u64)?,
                    })
                })?,
                partitions: r.list(17, |r| {
                    Ok(PartitionStatus {
                        partition: r.u32()?,
                        leader: r.opt(Reader::u64)?,
                        term: r.u64()?,
                        last_log_index: r.opt(Reader::u64)?,
                        committed_index: r.opt(Reader::u64)?,
                        applied_index: r.opt(Reader::u64)?,
                        replicas: r.list(10, |r| {
                            Ok(ReplicaStatus {
                                id: r.u64()?,
                                voter: r.bool()?,
                                matched_index: r.opt(Reader::u64)?,
                            })
                        })?,
                    })
                })?,
            })),
            Opcode::Reload => Response::Reloaded {
                generation: r.u64()?,
                tokens: r.u32()?,
                tls: r.bool()?,
            },
            Opcode::CreateQueue => Response::Created(r.bool()?),
            Opcode::GetQueue | Opcode::UpdateQueue => {
                Response::Queue(Box::new(get_settings(r, header.version)?))
            }
            Opcode::ListQueues => Response::Queues {
                names: r.list(2, Reader::str)?,
                next: r.opt(Reader::str)?,
            },
            Opcode::QueueStats => Response::Stats(Box::new(Stats {
                visible: r.u64()?,
                in_flight: r.u64()?,
                delayed: r.u64()?,
                deferred: r.u64()?,
                dead_lettered: r.u64()?,
                bytes: r.u64()?,
                oldest_age_ms: r.u64()?,
                puts: r.u64()?,
                deliveries: r.u64()?,
                deletes: r.u64()?,
                expiries: r.u64()?,
                dead_letterings: r.u64()?,
                redriven: r.u64()?,
                // Version 1's stats end here.
                created_at_ms: if header.version == 1 { 0 } else { r.u64()? },
                modified_at_ms: if header.version == 1 { 0 } else { r.u64()? },
                // Absent from an older server's answer.
                dedup_entries: if r.remaining() == 0 { 0 } else { r.u64()? },
                groups: if r.remaining() == 0 { 0 } else { r.u64()? },
                groups_in_flight: if r.remaining() == 0 { 0 } else { r.u64()? },
                // Version 3's.
                retries: if header.version < 3 || r.remaining() == 0 {
                    0
                } else {
                    r.u64()?
                },
            })),
            Opcode::Put => Response::Put(get_entries(r, |r| {
                Ok(PutAck {
                    id: r.u128()?,
                    seq: r.u64()?,
                })
            })?),
            Opcode::Receive | Opcode::Peek => Response::Messages(r.list(60, get_message)?),
            Opcode::UpdateVisibility => Response::Visibility(get_entries(r, Reader::u64)?),
            Opcode::Delete => Response::Deleted(get_entries(r, |_| Ok(()))?),
            Opcode::UpdateMessage => Response::Updated {
                receipt: r.opt(Reader::array::<RECEIPT_LEN>)?,
                visible_at_ms: r.u64()?,
            },
            Opcode::Release => Response::Released(get_entries(r, Reader::u64)?),
            Opcode::PauseQueue | Opcode::ResumeQueue => Response::Paused(
                Halves::of_bits(r.u8()?).ok_or(ProtoError::Malformed("an unknown paused bit"))?,
            ),
            Opcode::ReceiveDeferred => Response::Deferred(get_entries(r, get_message)?),
            Opcode::Redrive => Response::Redrive {
                moved: r.u64()?,
                scheduled: r.u64()?,
            },
            Opcode::StartMove | Opcode::CancelMove => {
                Response::Move(Box::new(get_move(r, header.version)?))
            }
            Opcode::ListMoves => Response::Moves(r.list(41, |r| get_move(r, header.version))?),
            Opcode::PreviewMove => Response::Preview {
                matched: r.u64()?,
                next: r.opt(Reader::u64)?,
                messages: r.list(5, |r| get_fields(r, Fields::KNOWN))?,
            },
            Opcode::Channels => Response::Channels {
                channels: r.list(17, |r| {
                    Ok(ChannelInfo {
                        name: r.opt(Reader::str)?,
                        visible: r.u64()?,
                        held: r.u64()?,
                    })
                })?,
                next: r.opt(Reader::str)?,
            },
        };
        r.finish()?;
        Ok(resp)
    }
}
