//! Retention through the engine: the `[retention]` table of `memtape.toml` (a default
//! policy, per-tenant and per-agent ones, and when `memtape serve` runs it), an agent's
//! policy set by an admin on the tape (`retention.policy`, over `memtape.toml`'s), and a
//! run: for each agent whose policy expires anything, one erasure of what it lets go, with
//! one `tape.erased` receipt in the agent's scope ([`Engine::erase`]'s mechanism, so the
//! index, the memory logs and the workspaces follow the same way).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use memtape_core::erasure::Selector;
use memtape_core::events::{BuiltinEvent, RETENTION_POLICY};
use memtape_core::retention::Retention;
use memtape_core::{Filter, Kind, NewEntry, Order, Scope};
use memtape_store::{EraseMode, EraseOutcome, EraseRequest, EraseTarget, Store};
use serde::{Deserialize, Serialize};

use crate::settings::Schedule;
use crate::{Engine, Error, Result};

/// When `memtape serve` runs retention by default: every day at 03:30 UTC.
pub const DEFAULT_RETENTION_SCHEDULE: &str = "30 3 * * *";

/// `[retention]` of `memtape.toml`: the default policy (its three keys), per-tenant
/// policies (`[retention.tenants.NAME]`) with per-agent ones in them
/// (`[retention.tenants.NAME.agents.AGENT]`), and the schedule. Unset everywhere means
/// nothing expires: raw conversation is kept until erased.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// When `memtape serve` runs retention: a 5-field cron expression read on UTC, or
    /// `off` (default `30 3 * * *`). Only one server of a store runs it.
    pub schedule: String,
    /// The default days the raw conversation is kept.
    pub messages_days: Option<u32>,
    /// The default days tool results are kept.
    pub tool_results_days: Option<u32>,
    /// Whether, by default, only consolidated entries expire.
    pub only_consolidated: Option<bool>,
    /// Policies per tenant.
    pub tenants: BTreeMap<String, TenantRetention>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            schedule: DEFAULT_RETENTION_SCHEDULE.into(),
            messages_days: None,
            tool_results_days: None,
            only_consolidated: None,
            tenants: BTreeMap::new(),
        }
    }
}

/// A tenant's policy in `memtape.toml`, and its agents'.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantRetention {
    /// Days the raw conversation is kept.
    pub messages_days: Option<u32>,
    /// Days tool results are kept.
    pub tool_results_days: Option<u32>,
    /// Whether only consolidated entries expire.
    pub only_consolidated: Option<bool>,
    /// Policies per agent of the tenant.
    pub agents: BTreeMap<String, Retention>,
}

impl RetentionConfig {
    /// Checks every policy's days and the schedule, naming the one at fault.
    pub fn validate(&self) -> Result<()> {
        let check = |at: String, p: Retention| {
            p.validate()
                .map_err(|e| Error::Config(format!("[{at}]: {e}")))
        };
        check("retention".into(), self.default_policy())?;
        for (tenant, t) in &self.tenants {
            check(format!("retention.tenants.{tenant}"), t.policy())?;
            for (agent, p) in &t.agents {
                check(format!("retention.tenants.{tenant}.agents.{agent}"), *p)?;
            }
        }
        self.schedule()?;
        Ok(())
    }

    /// The schedule `memtape serve` runs retention on (`None`: off).
    pub fn schedule(&self) -> Result<Option<Schedule>> {
        if self.schedule.trim() == "off" {
            return Ok(None);
        }
        Schedule::parse(&self.schedule, false)
            .map(Some)
            .map_err(|e| Error::Config(format!("[retention] schedule: {e}")))
    }

    fn default_policy(&self) -> Retention {
        Retention {
            messages_days: self.messages_days,
            tool_results_days: self.tool_results_days,
            only_consolidated: self.only_consolidated,
        }
    }

    /// The policy this file gives `agent` of `tenant`: the agent's over the tenant's over
    /// the default, field by field.
    pub fn policy(&self, tenant: &str, agent: &str) -> Retention {
        let mut policy = self.default_policy();
        if let Some(t) = self.tenants.get(tenant) {
            policy = t.policy().over(policy);
            if let Some(a) = t.agents.get(agent) {
                policy = a.over(policy);
            }
        }
        policy
    }
}

impl TenantRetention {
    fn policy(&self) -> Retention {
        Retention {
            messages_days: self.messages_days,
            tool_results_days: self.tool_results_days,
            only_consolidated: self.only_consolidated,
        }
    }
}

/// An agent's retention policy and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentRetention {
    /// The agent's scope.
    pub scope: Scope,
    /// The policy in effect: the one set on the tape over `memtape.toml`'s, field by field.
    pub effective: Retention,
    /// The policy an admin set on the tape (`None`: none was).
    pub set: Option<Retention>,
    /// The policy `memtape.toml` gives the agent.
    pub config: Retention,
}

/// One agent's part of a retention run.
#[derive(Clone, Debug, PartialEq)]
pub struct RetentionRun {
    /// The policy applied.
    pub policy: AgentRetention,
    /// What the erasure did (or would do, in a dry run).
    pub outcome: EraseOutcome,
}

impl<S: Store> Engine<S> {
    /// The retention policy of the agent of `scope` (its tenant and agent: a policy covers
    /// every user and session of the agent), with `config` from `memtape.toml`.
    pub fn retention(&self, scope: &Scope, config: &RetentionConfig) -> Result<AgentRetention> {
        let agent = scope.agent_scope();
        let filter = Filter {
            kinds: vec![Kind::Event],
            name: Some(RETENTION_POLICY.into()),
            order: Order::Desc,
            limit: Some(1),
            ..Default::default()
        };
        let set = match self.store.scan(&agent, &filter)?.first() {
            Some(entry) => match BuiltinEvent::from_payload(&entry.payload)? {
                Some(BuiltinEvent::RetentionPolicy(p)) => Some(p),
                _ => None,
            },
            None => None,
        };
        let config = config.policy(agent.tenant(), agent.agent_name());
        let effective = set.map_or(config, |s| s.over(config));
        Ok(AgentRetention {
            scope: agent,
            effective,
            set,
            config,
        })
    }

    /// Sets the retention policy of the agent of `scope` on the tape (an admin's act: the
    /// caller checks the role): fields left unset inherit `memtape.toml`'s. Returns the
    /// policy now in effect.
    pub fn set_retention(
        &self,
        scope: &Scope,
        policy: Retention,
        config: &RetentionConfig,
    ) -> Result<AgentRetention> {
        policy.validate()?;
        let entry = NewEntry::new(
            scope.agent_scope(),
            BuiltinEvent::RetentionPolicy(policy).to_payload(),
            self.now(),
        );
        let stored = self.store.append_reserved(vec![entry])?;
        self.after_write(&stored);
        self.retention(scope, config)
    }

    /// Runs retention over `tenant` (or every tenant): for each agent whose policy expires
    /// anything at this moment, one erasure of its raw conversation older than the policy
    /// keeps, recorded by one `tape.erased` receipt in the agent's scope (none when nothing
    /// expired). Memory is never expired. `by` names who ran it (`cli`, `schedule`, a
    /// key); `dry_run` counts and changes nothing.
    pub fn run_retention(
        &self,
        tenant: Option<&str>,
        config: &RetentionConfig,
        by: &str,
        dry_run: bool,
        data_dir: Option<&std::path::Path>,
    ) -> Result<Vec<RetentionRun>> {
        config.validate()?;
        let tenants = match tenant {
            Some(t) => vec![t.to_owned()],
            None => self.store.tenants()?,
        };
        let now = self.now();
        let mut runs = Vec::new();
        for tenant in tenants {
            let agents: BTreeSet<String> = self
                .store
                .scopes(&tenant)?
                .into_iter()
                .map(|i| i.scope.agent_name().to_owned())
                .collect();
            for agent in agents {
                let scope = Scope::agent(tenant.clone(), agent)?;
                let policy = self.retention(&scope, config)?;
                let Some(expiry) = policy.effective.expiry(now) else {
                    continue;
                };
                let outcome = self.erase_request(
                    EraseRequest {
                        target: EraseTarget::Expired {
                            within: scope.clone(),
                            expiry,
                        },
                        mode: EraseMode::Whole,
                        receipt_scope: scope.clone(),
                        selector: selector(&policy.effective),
                        by: by.to_owned(),
                        reason: String::new(),
                        at: now,
                        dry_run,
                    },
                    data_dir,
                )?;
                runs.push(RetentionRun { policy, outcome });
            }
        }
        Ok(runs)
    }
}

/// What a retention run's receipt records of its policy.
fn selector(policy: &Retention) -> Selector {
    Selector::Retention {
        messages_days: policy.messages_days,
        tool_results_days: policy.tool_results_days,
        only_consolidated: policy.only_consolidated.unwrap_or(false),
    }
}

/// When the next run after `after` is due, on `config`'s schedule (`None`: off).
pub fn next_run(config: &RetentionConfig, after: DateTime<Utc>) -> Result<Option<DateTime<Utc>>> {
    Ok(config.schedule()?.and_then(|s| s.next_after(after)))
}
