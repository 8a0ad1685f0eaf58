//! The context an agent sends its LLM, built from a session, its memory and the tape.
//!
//! [`Engine::context`] reads what the pure builder ([`memtape_core::context::build`])
//! needs — the memory view of the session's agent (and user), the session's thread after
//! the compaction in effect, and the session's recent compaction records — and writes back
//! what must outlive the call: a new compaction as a `context.compaction` event on the
//! session's tape, and (Qanot) the working buffer as a memory change. The next call, in
//! this process or another, reads them back, so a summary is made once and the prompt's
//! prefix stays the same from turn to turn.
//!
//! Everything of [`memtape_core::context`] (the configuration, the result, the rendering
//! and measuring functions) is re-exported here.

pub use memtape_core::context::*;

use chrono::{DateTime, Utc};
use memtape_core::events::{self, BuiltinEvent};
use memtape_core::memory::{Change, Op, paths};
use memtape_core::summary::{DEFAULT_SUMMARY_MAX_TOKENS, ExtractiveSummarizer, Summarizer};
use memtape_core::{
    AsOf, Entry, EntryId, Filter, HistoryLimits, HistoryView, Kind, NewEntry, Order, Scope,
};
use memtape_store::Store;

use crate::{Engine, Error, Result, memory_scope};

/// How many of a session's latest compaction records are read: the one in effect is
/// almost always the newest; older ones matter only after a branch of the thread, and as
/// MateClaw's summary cache.
const COMPACTIONS_READ: usize = 32;

impl<S: Store> Engine<S> {
    /// The prompt for `session` under `request`: the system message (system prompt, agent
    /// files, `<memory>` block, date and time), the compaction in effect, the history and
    /// the current message, within the request's token budget. Summaries come from the
    /// extractive summarizer, bounded by MateClaw's `summary_max_tokens`; use
    /// [`Engine::context_with`] to plug in another (an LLM).
    ///
    /// A new compaction is recorded on the session's tape (unless `request.record` is
    /// off or it is an emergency build), and under Qanot's policy the working buffer is
    /// kept in the memory of the session's agent (and user).
    ///
    /// ```
    /// use memtape::{ContextConfig, ContextRequest, Engine, Message, Policy, Scope};
    ///
    /// let engine = Engine::in_memory();
    /// let chat = Scope::agent("default", "default")?.with_session("demo")?;
    /// engine.append(&chat, Message::user("My name is Ada."), Default::default())?;
    /// let request = ContextRequest {
    ///     system_prompt: "You are helpful.".into(),
    ///     config: ContextConfig::new(8_000, Policy::default()),
    ///     ..ContextRequest::default()
    /// };
    /// let context = engine.context(&chat, &request)?;
    /// assert_eq!(context.messages.len(), 2); // the system message and the user's
    /// assert!(context.tokens <= 8_000);
    /// # Ok::<(), memtape::Error>(())
    /// ```
    pub fn context(&self, session: &Scope, request: &ContextRequest) -> Result<Context> {
        let max_tokens = match &request.config.policy {
            Policy::MateClaw(p) => p.summary_max_tokens,
            Policy::Qanot(_) => DEFAULT_SUMMARY_MAX_TOKENS,
        };
        self.context_with(session, request, &ExtractiveSummarizer::new(max_tokens))
    }

    /// [`Engine::context`] with the compaction summary made by `llm` (MateClaw: the older
    /// messages summarized by the model within the policy's summary bound, 300 tokens by
    /// default; cached as every compaction is). If the model fails, the compaction keeps
    /// the messages it would have replaced, as with any summarizer.
    pub fn context_with_model(
        &self,
        session: &Scope,
        request: &ContextRequest,
        llm: &dyn memtape_llm::Llm,
    ) -> Result<Context> {
        let max_tokens = match &request.config.policy {
            Policy::MateClaw(p) => p.summary_max_tokens,
            Policy::Qanot(_) => DEFAULT_SUMMARY_MAX_TOKENS,
        };
        let summarizer = ModelSummarizer {
            engine: self,
            llm,
            session,
            max_tokens,
        };
        self.context_with(session, request, &summarizer)
    }

    /// [`Engine::context_with_model`] when there is a model, [`Engine::context`] when not.
    pub fn context_using(
        &self,
        session: &Scope,
        request: &ContextRequest,
        llm: Option<&dyn memtape_llm::Llm>,
    ) -> Result<Context> {
        match llm {
            Some(llm) => self.context_with_model(session, request, llm),
            None => self.context(session, request),
        }
    }

    /// [`Engine::context`] with `summarizer` making compaction summaries.
    pub fn context_with(
        &self,
        session: &Scope,
        request: &ContextRequest,
        summarizer: &dyn Summarizer,
    ) -> Result<Context> {
        if session.session().is_none() {
            return Err(Error::Config(format!(
                "{session}: a context is built for a session; name one"
            )));
        }
        request.config.validate().map_err(Error::Config)?;
        let as_of = request.as_of.as_ref();
        let now = match as_of {
            None => self.now(),
            Some(AsOf::Time(t)) => *t,
            // The time of the session's latest entry at that moment: the clock when the
            // prompt would have been built next.
            Some(moment @ AsOf::Entry(_)) => {
                let latest = moment.narrow(Filter {
                    order: Order::Desc,
                    limit: Some(1),
                    ..Filter::default()
                });
                let found = self.store.scan(session, &latest)?;
                found.first().map_or_else(|| self.now(), |e| e.created_at)
            }
        };
        let memory_scope = memory_scope(session)?;
        let memory = self.memory_as_of(&memory_scope, as_of)?;
        let (head, pointer) = self.session_state(session, as_of)?;

        let recorded = self.compactions(session, as_of)?;
        let (compaction, tail) = self.context_tail(
            session,
            head,
            pointer,
            &recorded,
            request.config.max_messages,
            as_of,
        )?;
        let after = compaction.as_ref().map_or(pointer, Compaction::through);
        let kept_head = match &compaction {
            Some(Compaction::Qanot { head, .. }) => {
                let ids: Vec<EntryId> = head.iter().copied().filter(|id| *id > pointer).collect();
                self.store
                    .get_many(session.tenant(), &ids)?
                    .into_iter()
                    .filter(|e| e.scope == *session)
                    .filter_map(|e| e.message().cloned().map(|m| (e.id, m)))
                    .collect()
            }
            _ => Vec::new(),
        };
        let history = tail
            .iter()
            .filter_map(|e| e.message().cloned().map(|m| (e.id, m)))
            .collect();
        let built = build(
            BuildInput {
                request,
                memory: &memory,
                now,
                after,
                history,
                compaction,
                head: kept_head,
                cache: &recorded,
            },
            summarizer,
            self.tokens(),
        )?;

        if request.record && !request.emergency && as_of.is_none() {
            if let Some(made) = &built.record {
                self.append_payload(session, made.to_payload())?;
            }
            if built.context.working_buffer {
                self.keep_working_buffer(session, &memory_scope, &tail, now)?;
            }
        }
        Ok(built.context)
    }

    /// The session's latest compaction records, newest first, with their times.
    fn compactions(
        &self,
        session: &Scope,
        as_of: Option<&AsOf>,
    ) -> Result<Vec<(Compaction, DateTime<Utc>)>> {
        let filter = Filter {
            kinds: vec![Kind::Event],
            name: Some(events::CONTEXT_COMPACTION.to_owned()),
            order: Order::Desc,
            limit: Some(COMPACTIONS_READ),
            ..Filter::default()
        };
        self.store
            .scan(session, &AsOf::narrow_opt(as_of, filter))?
            .iter()
            .filter_map(|e| Compaction::from_entry(e).map(|c| c.map(|c| (c, e.created_at))))
            .collect::<memtape_core::Result<_>>()
            .map_err(Error::from)
    }

    /// The compaction in effect and the thread after it: the newest record whose `through`
    /// is on the current thread (after the consolidation pointer), or none and the thread
    /// after the pointer. A record made on another branch (before a regenerated message)
    /// is not in effect on this one.
    fn context_tail(
        &self,
        session: &Scope,
        head: Option<EntryId>,
        pointer: EntryId,
        recorded: &[(Compaction, DateTime<Utc>)],
        max: usize,
        as_of: Option<&AsOf>,
    ) -> Result<(Option<Compaction>, Vec<Entry>)> {
        if self.history_view_as_of(session, as_of)? == HistoryView::Bub {
            // Bub's view is the tape after the last anchor, in order: a compaction is in
            // effect while the entry it runs through is in that view.
            let limits = HistoryLimits {
                max_messages: max,
                max_tokens: None,
            };
            let view = self.history_in_as_of(session, &limits, HistoryView::Bub, as_of)?;
            for (compaction, _) in recorded {
                let through = compaction.through();
                if let Some(at) = view.iter().position(|e| e.id == through) {
                    return Ok((Some(compaction.clone()), view[at + 1..].to_vec()));
                }
            }
            return Ok((None, view));
        }
        let Some(head) = head else {
            return Ok((None, Vec::new()));
        };
        for (compaction, _) in recorded {
            let through = compaction.through();
            if through <= pointer || through > head {
                continue;
            }
            let tail = self.walk(session, head, through, max)?;
            let on_thread = match tail.first() {
                Some(first) => first.parent == Some(through),
                None => head == through,
            };
            if on_thread {
                return Ok((Some(compaction.clone()), tail));
            }
        }
        Ok((None, self.walk(session, head, pointer, max)?))
    }

    /// Qanot's working buffer: once a session's prompt passes the buffer threshold, every
    /// completed exchange is appended to `memory/working-buffer.md` of its memory scope.
    /// The first time, the buffer starts afresh (with Qanot's header) and takes the latest
    /// exchange; later, every exchange after the last one copied. How far the session was
    /// copied is a `context.working_buffer` event on its tape, written in the same
    /// transaction as the memory change.
    fn keep_working_buffer(
        &self,
        session: &Scope,
        memory_scope: &Scope,
        tail: &[Entry],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let filter = Filter {
            kinds: vec![Kind::Event],
            name: Some(events::CONTEXT_WORKING_BUFFER.to_owned()),
            order: Order::Desc,
            limit: Some(1),
            ..Filter::default()
        };
        let copied = self
            .store
            .scan(session, &filter)?
            .first()
            .map(|e| BuiltinEvent::from_payload(&e.payload))
            .transpose()?
            .and_then(|event| match event {
                Some(BuiltinEvent::WorkingBuffer(t)) => Some(t.through),
                _ => None,
            });
        let all = exchanges(tail);
        let (op, new) = match copied {
            None => {
                let new: Vec<_> = all.last().cloned().into_iter().collect();
                let mut text = working_buffer_header(now);
                for x in &new {
                    text.push_str(&working_buffer_entry(x.at, &x.human, &x.agent));
                }
                let op = Op::Write {
                    path: paths::WORKING_BUFFER.to_owned(),
                    content: text,
                };
                (op, new)
            }
            Some(through) => {
                let new: Vec<_> = all.into_iter().filter(|x| x.id > through).collect();
                if new.is_empty() {
                    return Ok(());
                }
                let text = new
                    .iter()
                    .map(|x| working_buffer_entry(x.at, &x.human, &x.agent))
                    .collect();
                let op = Op::Append {
                    path: paths::WORKING_BUFFER.to_owned(),
                    text,
                    heading: Some(working_buffer_header(now)),
                };
                (op, new)
            }
        };
        let through = new.last().map_or(EntryId(0), |x| x.id);
        // The same checks every memory change passes (a long buffer keeps its newest
        // exchanges under the size limit).
        let view = self.memory_log(memory_scope)?.0.view();
        let change = view
            .admit(Change::one(op, "context.working_buffer").caused_by(new.iter().map(|x| x.id)))?;
        let mark = BuiltinEvent::working_buffer(through).to_payload();
        self.append_entries(vec![
            NewEntry::new(memory_scope.clone(), change.to_payload(), now),
            NewEntry::new(session.clone(), mark, now),
        ])?;
        Ok(())
    }
}

/// A compaction summary made by a model (MateClaw's `ConversationWindowManager`), each call
/// recorded on the tape.
struct ModelSummarizer<'a, S: Store> {
    engine: &'a Engine<S>,
    llm: &'a dyn memtape_llm::Llm,
    session: &'a Scope,
    max_tokens: usize,
}

/// MateClaw cuts each message of the summary input at this many characters.
const SUMMARY_MESSAGE_CHARS: usize = 2000;

impl<S: Store> Summarizer for ModelSummarizer<'_, S> {
    fn summarize(
        &self,
        messages: &[memtape_core::Message],
        previous: Option<&str>,
    ) -> memtape_core::Result<String> {
        let mut conversation = String::new();
        if let Some(previous) = previous.filter(|p| !p.trim().is_empty()) {
            conversation.push_str(&format!("Summary so far: {}\n\n", previous.trim()));
        }
        for m in messages {
            let text = m.content_text();
            if text.trim().is_empty() {
                continue;
            }
            let label = match m.role {
                memtape_core::Role::User => "User",
                memtape_core::Role::System => "System",
                _ => "Assistant",
            };
            let text = if text.chars().count() > SUMMARY_MESSAGE_CHARS {
                let cut: String = text.chars().take(SUMMARY_MESSAGE_CHARS).collect();
                format!("{cut}...[truncated]")
            } else {
                text.into_owned()
            };
            conversation.push_str(&format!("{label}: {text}\n\n"));
        }
        let failed = |e: Error| memtape_core::Error::Summarize(e.to_string());
        let system = self
            .engine
            .prompt(self.session, &crate::prompts::SUMMARY_SYSTEM, &[])
            .map_err(failed)?;
        let user = self
            .engine
            .prompt(
                self.session,
                &crate::prompts::SUMMARY_USER,
                &[("conversation", conversation.trim_end())],
            )
            .map_err(failed)?;
        let mut request = memtape_llm::ChatRequest::new(vec![
            memtape_llm::Message::system(system),
            memtape_llm::Message::user(user),
        ]);
        request.max_tokens = Some(u32::try_from(self.max_tokens).unwrap_or(u32::MAX));
        self.engine
            .call_llm(self.llm, self.session, "compaction", &request, |reply| {
                let text = reply.content.trim();
                if text.is_empty() {
                    return Err(Error::Model("the summary is empty".into()));
                }
                Ok(text.to_owned())
            })
            .map_err(failed)
    }
}
