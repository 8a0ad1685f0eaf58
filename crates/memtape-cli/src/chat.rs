//! `memtape chat`: a terminal agent that uses all of memtape's memory, for people to try
//! it and for the end-to-end test. Each line of standard input is a turn (so it also runs
//! non-interactively, from a pipe):
//!
//! 1. Qanot's WAL scans the user's message before anything answers it, and the message is
//!    on the tape before the model is called.
//! 2. The context builder fits the system prompt, memory and history into the budget (a
//!    compaction summary made by the model when one is due); a `context_length_exceeded`
//!    from the provider rebuilds it with MateClaw's emergency path and tries once more.
//! 3. The memory tools (Bub's and memory_search by default) are offered to the model and
//!    run; their calls and results go on the tape. The reply is streamed.
//! 4. After the reply: Qanot's daily note for the exchange (`Engine::note_exchange`, as
//!    servers write it; `[lifecycle.daily_notes]` can turn it off), and nanobot's consolidation in
//!    the background once the session reaches its window.
//!
//! `/new` (nanobot: wait for consolidation, archive everything, clear), `/memory`,
//! `/search QUERY`, `/undo`, `/help` and `/quit`. On exit, MateClaw's post-conversation
//! extraction runs and background consolidations are waited for.
//!
//! Beside the conversation, stderr says what the user must know ([`Notes`]): what was
//! saved to memory, and what failed. How memtape got there (the tools the model called,
//! why an extraction did nothing) shows with `--verbose`.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::{Args, ValueEnum};
use memtape::{
    Background, ContextConfig, ContextRequest, DailyNotes, DynStore, Engine, MateClaw, Message,
    Mode, Policy, Qanot, Scope, SearchFilter, SearchRequest, ToolCall, Trigger, memory_scope,
};
use memtape_llm::{ChatRequest, Llm, ToolSpec};
use serde_json::Value;

use crate::config;
use crate::ctx::{Ctx, ModelArgs, ScopeArgs, open};
use crate::output::escape;
use crate::retrieval::{Tuning, open_indexed};

/// Which memory tools the model is offered.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolSet {
    /// Bub's memory tools and memory_search (small enough for small models).
    Bub,
    /// Every tool of the registry.
    All,
    /// None: the model only answers.
    None,
}

/// The context policy.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyArg {
    /// MateClaw: summarize all but the most recent pairs.
    Mateclaw,
    /// Qanot: keep the first and last messages, summarize the middle.
    Qanot,
}

/// The end of `memtape chat --help`: where the model's settings come from.
pub const ENVIRONMENT: &str = "\
The model: memtape.toml's [llm] table in the data directory, and these variables, which win key by key:
  MEMTAPE_LLM_PROVIDER     openai (the default: any OpenAI-compatible server) or anthropic
  MEMTAPE_LLM_BASE_URL     the server's address, e.g. http://127.0.0.1:8080/v1
  MEMTAPE_LLM_MODEL        the model's name
  MEMTAPE_LLM_API_KEY      the key, when the server wants one
  MEMTAPE_LLM_TIMEOUT      seconds per attempt
  MEMTAPE_LLM_MAX_RETRIES  retries of a failed call
  MEMTAPE_LLM_MEMORY_TOOL  anthropic: auto (the default), native or schema: whether the memory tool goes as memory_20250818
With no provider, address or model set anywhere there is no model, and nothing is sent anywhere.";

/// `memtape chat`'s arguments.
#[derive(Args, Debug)]
pub struct ChatArgs {
    /// The session to talk in (created if new).
    #[arg(default_value = "chat")]
    session: String,
    /// The system prompt.
    #[arg(
        long,
        default_value = "You are a helpful assistant with long-term memory."
    )]
    system: String,
    /// The prompt's token budget.
    #[arg(long, default_value_t = 8000)]
    budget: usize,
    /// The context policy.
    #[arg(long, value_enum, default_value = "mateclaw")]
    policy: PolicyArg,
    /// The memory tools offered to the model.
    #[arg(long, value_enum, default_value = "bub")]
    tools: ToolSet,
    /// Wait for each reply whole instead of streaming it.
    #[arg(long)]
    no_stream: bool,
    /// The longest reply, in tokens.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_tokens: u32,
    /// Print, on exit, how long memory work took per turn (the model's time left out).
    #[arg(long)]
    timings: bool,
    /// Where the conversation comes from (MateClaw's trigger source): web, channel or
    /// cron. A scheduled task's chat (cron) gets no extraction on exit while skip_cron is
    /// on.
    #[arg(long, value_name = "web|channel|cron")]
    source: Option<memtape::Source>,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub models: ModelArgs,
}

/// At most this many rounds of tool calls per turn.
const TOOL_ROUNDS: usize = 5;

/// What the chat says on stderr beside the conversation, by who needs it. Always: what
/// failed. Unless `--quiet`: what was saved to memory (the files a tool the model called
/// changed, what the WAL copied to MEMORY.md, what extraction saved, what consolidation
/// moved), a prompt cut short for the model, and the banner on a terminal. Only with
/// `--verbose`: how memtape got there (what the WAL noted in the working state, each tool
/// call, an extraction or a consolidation that did nothing, the banner in a pipe).
#[derive(Clone, Copy, Debug)]
struct Notes {
    verbose: bool,
    quiet: bool,
}

impl Notes {
    /// A failure: always shown.
    fn failure(self, line: impl std::fmt::Display) {
        eprintln!("{line}");
    }

    /// What the user must know (a saved memory): shown unless `--quiet`.
    fn tell(self, line: impl std::fmt::Display) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    /// How memtape got there: shown with `--verbose`.
    fn detail(self, line: impl std::fmt::Display) {
        if self.verbose {
            eprintln!("{line}");
        }
    }
}

/// The chat's state.
struct Chat<'a> {
    engine: Arc<Engine<DynStore>>,
    llm: Arc<dyn Llm>,
    background: Background<DynStore>,
    session: Scope,
    args: &'a ChatArgs,
    lifecycle: memtape::LifecycleConfig,
    tools: Vec<ToolSpec>,
    /// Memory work per turn, the model's time left out.
    spent: Vec<Duration>,
    /// Where attachments (Dify's file references) are read from.
    files: memtape::FilesDir,
    /// What to say on stderr.
    notes: Notes,
}

/// `memtape chat`.
pub fn chat(ctx: &Ctx, args: &ChatArgs, out: &mut impl Write) -> Result<()> {
    let config = config::load(ctx)?;
    let llm: Arc<dyn Llm> = Arc::from(config.require_llm()?);
    let dir = ctx.data_dir()?;
    drop(crate::ctx::init(ctx)?);
    let engine = if memtape::Index::exists_in(&dir) {
        open_indexed(ctx, &Tuning::default())?
    } else {
        open(ctx)?
    };
    let engine = Arc::new(engine);
    let session = ctx.base_scope()?.with_session(&args.session)?;
    let notes = Notes {
        verbose: ctx.verbose,
        quiet: ctx.quiet,
    };
    let background = Background::new(engine.clone(), llm.clone(), config.lifecycle.clone())
        .on_done(move |session, outcome| match outcome {
            Ok(done) if done.through.is_some() => notes.tell(format_args!(
                "[memory] consolidated {} messages of {session} into memory{}",
                done.messages,
                if done.dropped > 0 {
                    format!(" ({} dropped facts kept)", done.dropped)
                } else {
                    String::new()
                }
            )),
            Ok(_) => notes.detail(format_args!(
                "[memory] consolidation of {session}: nothing to move"
            )),
            Err(e) => notes.failure(format_args!(
                "[memory] consolidation failed, nothing lost: {e}"
            )),
        });
    let tools = match args.tools {
        ToolSet::None => Vec::new(),
        ToolSet::All => memtape::tools::registry(),
        ToolSet::Bub => memtape::tools::registry()
            .into_iter()
            .filter(|t| t.name.starts_with("memory.") || t.name == "memory_search")
            .filter(|t| t.name != "memory.clear" && t.name != "memory.forget")
            .collect(),
    }
    .into_iter()
    .map(|t| ToolSpec {
        name: t.function_name(),
        description: t.description.to_owned(),
        parameters: t.input_schema.clone(),
    })
    .collect();
    let mut chat = Chat {
        engine,
        llm,
        background,
        session,
        args,
        lifecycle: config.lifecycle,
        tools,
        spent: Vec::new(),
        files: memtape::FilesDir::new(dir.join(memtape::FILES_DIR)),
        notes,
    };
    // The token counter loads its vocabulary on first use (about 0.1 s): at start, not in
    // the first turn.
    chat.engine.tokens().count("warm up");
    let interactive = std::io::stdin().is_terminal();
    let banner = format!(
        "memtape chat: {} with {} at {} ({}). /help for commands, /quit or Ctrl-D to leave.",
        chat.session,
        chat.llm.model(),
        config.llm.as_ref().map_or("", |l| l.base_url.as_str()),
        config.llm_origin.as_deref().unwrap_or_default(),
    );
    if interactive {
        notes.tell(banner);
    } else {
        notes.detail(banner);
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        // What the last line wrote (a command's answer, a turn's end) shows now, not when
        // the buffer fills or the chat ends.
        out.flush().context("writing standard output")?;
        if interactive {
            eprint!("you> ");
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading standard input")?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(command) = line.strip_prefix('/') {
            if !chat.command(command, out)? {
                break;
            }
            continue;
        }
        if let Err(e) = chat.turn(line, out) {
            // The user's message is on the tape; the turn can be tried again.
            writeln!(out)?;
            if unreachable(&e) {
                // Nothing answers at the model's address: no later turn would fare better.
                chat.background.wait_idle();
                out.flush()?;
                return Err(
                    e.context("the model server cannot be reached; the message is on the tape")
                );
            }
            notes.failure(format_args!("error: {e:#}"));
        }
    }
    chat.finish(out)
}

/// The memory files that changes after version `before` of `memory` touched, each once,
/// in the order first touched.
fn changed_since(engine: &Engine<DynStore>, memory: &Scope, before: u64) -> Result<Vec<String>> {
    let (log, _) = engine.memory_log(memory)?;
    let mut paths: Vec<String> = Vec::new();
    for recorded in log.changes().iter().filter(|r| r.version > before) {
        for path in recorded.change.ops.iter().flat_map(|op| op.paths()) {
            if !paths.iter().any(|p| p == path) {
                paths.push(path.to_owned());
            }
        }
    }
    Ok(paths)
}

/// Whether `e` says nothing answered at the model's address.
fn unreachable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<memtape_llm::Error>()
            .is_some_and(|e| matches!(e, memtape_llm::Error::Unreachable { .. }))
    })
}

impl Chat<'_> {
    /// The context request for this turn.
    fn request(&self, emergency: bool) -> ContextRequest {
        let policy = match self.args.policy {
            PolicyArg::Mateclaw => Policy::MateClaw(MateClaw::default()),
            PolicyArg::Qanot => Policy::Qanot(Qanot::default()),
        };
        ContextRequest {
            system_prompt: self.args.system.clone(),
            message: None,
            config: ContextConfig {
                // The memory skill (how and when to save, Bub's rule 7) when the model has
                // memory tools and memtape.toml does not turn it off.
                memory_skill: self.lifecycle.memory_skill && self.args.tools != ToolSet::None,
                // The reply this turn asks for: Qanot's compaction looks at the next turn.
                reply_tokens: self.args.max_tokens as usize,
                ..ContextConfig::new(self.args.budget, policy)
            },
            emergency,
            record: true,
            as_of: None,
        }
    }

    /// One exchange: the user's `text`, the model's reply (with any tool calls run).
    fn turn(&mut self, text: &str, out: &mut impl Write) -> Result<()> {
        let mut memory_time = Duration::ZERO;
        let started = Instant::now();
        let engine = self.engine.clone();
        // The message on the tape, then Qanot's WAL, both before the model is called.
        let message = engine.append(&self.session, Message::user(text), Default::default())?;
        let captured = engine.capture_entry(&message)?;
        for hit in &captured.matches {
            self.notes.detail(format_args!(
                "[memory] noted {}: {}",
                hit.category,
                escape(&hit.text, false)
            ));
        }
        if captured.saved_long_term > 0 {
            self.notes.tell(format_args!(
                "[memory] the WAL saved {} line{} of your message to MEMORY.md",
                captured.saved_long_term,
                if captured.saved_long_term == 1 {
                    ""
                } else {
                    "s"
                }
            ));
        }
        memory_time += started.elapsed();
        let mut emergency = false;
        let mut reply = None;
        for _ in 0..TOOL_ROUNDS {
            let built = Instant::now();
            // A compaction summary the model writes is the model's time, not memory work.
            let summarizer = Timed::new(self.llm.as_ref());
            let context =
                engine.context_with_model(&self.session, &self.request(emergency), &summarizer)?;
            let messages = context
                .messages
                .iter()
                .map(|m| memtape::llm_message(m, &self.files))
                .collect::<memtape::Result<Vec<_>>>()?;
            let mut request = ChatRequest::new(messages);
            request.tools = self.tools.clone();
            request.max_tokens = Some(self.args.max_tokens);
            memory_time += built.elapsed().saturating_sub(summarizer.spent());
            let answer = if self.args.no_stream {
                self.llm.chat(&request)
            } else {
                self.llm.chat_stream(&request, &mut |piece| {
                    // Streaming is for the person watching; a closed pipe ends at the next line.
                    let _ = write!(out, "{piece}");
                    let _ = out.flush();
                })
            };
            let answer = match answer {
                Err(memtape_llm::Error::ContextLength { .. }) if !emergency => {
                    // MateClaw's compactForRetry: only the last messages, one more try.
                    self.notes.tell(
                        "[memory] the prompt was too long for the model; retrying with the last messages only",
                    );
                    emergency = true;
                    continue;
                }
                other => other?,
            };
            let bookkeeping = Instant::now();
            if self.args.no_stream && !answer.content.is_empty() {
                write!(out, "{}", answer.content)?;
            }
            if answer.tool_calls.is_empty() {
                if !answer.content.trim().is_empty() {
                    reply = Some(engine.append(
                        &self.session,
                        Message::assistant(&answer.content),
                        Default::default(),
                    )?);
                }
                memory_time += bookkeeping.elapsed();
                break;
            }
            let calls: Vec<ToolCall> = answer
                .tool_calls
                .iter()
                .map(|c| {
                    ToolCall::function(
                        &c.id,
                        &c.name,
                        Value::Object(c.arguments.clone()).to_string(),
                    )
                })
                .collect();
            let mut said = Message::assistant_tool_calls(calls);
            if !answer.content.trim().is_empty() {
                said.content = Some(memtape::Content::Text(answer.content.clone()));
            }
            let mut results = vec![said];
            let memory = memory_scope(&self.session)?;
            for call in &answer.tool_calls {
                let input = Value::Object(call.arguments.clone());
                let before = engine.memory_log(&memory)?.0.version();
                let output = engine.call_tool(&self.session, &call.name, &input)?;
                self.notes.detail(format_args!(
                    "[tool] {}{}",
                    call.name,
                    if output.is_error { " (refused)" } else { "" }
                ));
                let changed = changed_since(&engine, &memory, before)?;
                if !changed.is_empty() {
                    self.notes.tell(format_args!(
                        "[memory] {} saved {}",
                        call.name,
                        changed.join(", ")
                    ));
                }
                results.push(Message::tool_result(&call.id, output.text));
            }
            engine.append_messages(&self.session, results)?;
            memory_time += bookkeeping.elapsed();
        }
        writeln!(out)?;
        let after = Instant::now();
        // Qanot's automatic daily note for the exchange, unless memtape.toml turns it off.
        let notes = self
            .lifecycle
            .daily_notes
            .for_agent(self.session.agent_name(), DailyNotes::Qanot);
        if let Some(reply) = &reply
            && notes == DailyNotes::Qanot
        {
            engine.note_exchange(reply)?;
        }
        if let Err(e) = self.background.nudge(&self.session) {
            self.notes.failure(format_args!(
                "[memory] could not check whether to consolidate: {e}"
            ));
        }
        memory_time += after.elapsed();
        self.spent.push(memory_time);
        Ok(())
    }

    /// Runs a slash command; `false` ends the chat.
    fn command(&mut self, command: &str, out: &mut impl Write) -> Result<bool> {
        let (name, rest) = command.split_once(' ').unwrap_or((command, ""));
        let memory = memory_scope(&self.session)?;
        match name {
            "quit" | "exit" => return Ok(false),
            "help" => writeln!(
                out,
                "/new — start a new conversation (the current one is archived to memory)\n\
                 /memory — show the memory\n/search QUERY — search the tape and memory\n\
                 /undo — undo the last change to memory\n/quit — leave"
            )?,
            "new" => {
                // nanobot: wait for the consolidation in flight, archive all, then clear.
                self.background.wait_idle();
                match self.engine.new_session_with_model(
                    &self.session,
                    self.llm.as_ref(),
                    self.lifecycle.consolidation(true),
                ) {
                    Ok(_) => writeln!(out, "New session started.")?,
                    Err(e) => {
                        self.notes.failure(format_args!("error: {e}"));
                        writeln!(
                            out,
                            "Memory archival failed, session not cleared. Please try again."
                        )?;
                    }
                }
            }
            "memory" => {
                let shown = self.engine.call_tool(
                    &memory,
                    "memory.show",
                    &Value::Object(Default::default()),
                )?;
                writeln!(out, "{}", escape(&shown.text, false))?;
            }
            "search" => {
                let query = rest.trim();
                if query.is_empty() {
                    writeln!(out, "usage: /search QUERY")?;
                } else if self.engine.index().is_some() {
                    let filter = SearchFilter::within(&self.session.agent_scope());
                    let request = SearchRequest::new(query, filter)
                        .limit(5)
                        .mode(Mode::Hybrid);
                    let hits = self.engine.search(&request)?;
                    if hits.is_empty() {
                        writeln!(out, "nothing found")?;
                    }
                    for hit in hits {
                        let text = hit.entry.payload.search_text().unwrap_or_default();
                        let text: String = text.chars().take(160).collect();
                        writeln!(out, "#{} {}", hit.entry.id, escape(&text, false))?;
                    }
                } else {
                    let input = serde_json::json!({"query": query, "limit": 5});
                    let found = self.engine.call_tool(&memory, "memory_search", &input)?;
                    writeln!(out, "{}", escape(&found.text, false))?;
                }
            }
            "undo" => {
                let (log, _) = self.engine.memory_log(&memory)?;
                let version = log.version();
                if version == 0 {
                    writeln!(out, "memory has no changes to undo")?;
                } else {
                    match self.engine.undo_memory(&memory, version - 1)? {
                        Some(r) => writeln!(
                            out,
                            "memory is back to version {}, recorded as version {}",
                            version - 1,
                            r.version
                        )?,
                        None => writeln!(out, "memory already matches version {}", version - 1)?,
                    }
                }
            }
            other => writeln!(out, "unknown command /{other}; /help lists them")?,
        }
        Ok(true)
    }

    /// Leaving: MateClaw's post-conversation extraction, then the background work.
    fn finish(&mut self, out: &mut impl Write) -> Result<()> {
        let config = &self.lifecycle.extraction;
        let trigger = match self.args.source {
            Some(source) => source.trigger(),
            None => Trigger::Conversation { source: "chat" },
        };
        match self
            .engine
            .extract(&self.session, self.llm.as_ref(), config, trigger)
        {
            Ok(run) => match run.skipped {
                Some(why) => self
                    .notes
                    .detail(format_args!("[memory] no extraction: {why}")),
                None if run.changed.is_empty() => self.notes.detail(format_args!(
                    "[memory] extraction: nothing new ({})",
                    run.reason
                )),
                None => self.notes.tell(format_args!(
                    "[memory] extraction saved {}{}",
                    run.changed.join(", "),
                    if run.dropped > 0 {
                        format!(" ({} dropped facts kept)", run.dropped)
                    } else {
                        String::new()
                    }
                )),
            },
            Err(e) => self.notes.failure(format_args!(
                "[memory] extraction failed, nothing written: {e}"
            )),
        }
        self.background.wait_idle();
        if self.args.timings && !self.spent.is_empty() {
            let mut ms: Vec<f64> = self
                .spent
                .iter()
                .map(|d| d.as_secs_f64() * 1000.0)
                .collect();
            ms.sort_by(f64::total_cmp);
            let p50 = ms[ms.len() / 2];
            let p90 = ms[(ms.len() * 9 / 10).min(ms.len() - 1)];
            let max = ms[ms.len() - 1];
            eprintln!(
                "[timings] memory work per turn over {} turns (model time excluded): p50 {p50:.2} ms, p90 {p90:.2} ms, max {max:.2} ms",
                ms.len()
            );
        }
        out.flush()?;
        Ok(())
    }
}

/// A model that keeps count of the time spent in it, so that time can be left out of the
/// memory work a turn is measured for.
struct Timed<'a> {
    inner: &'a dyn Llm,
    spent: std::sync::Mutex<Duration>,
}

impl<'a> Timed<'a> {
    fn new(inner: &'a dyn Llm) -> Self {
        Timed {
            inner,
            spent: std::sync::Mutex::new(Duration::ZERO),
        }
    }

    fn spent(&self) -> Duration {
        *self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Llm for Timed<'_> {
    fn model(&self) -> &str {
        self.inner.model()
    }

    fn chat(&self, request: &ChatRequest) -> memtape_llm::Result<memtape_llm::ChatResponse> {
        let started = Instant::now();
        let reply = self.inner.chat(request);
        *self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += started.elapsed();
        reply
    }
}
