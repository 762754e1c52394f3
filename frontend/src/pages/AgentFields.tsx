/**
 * The submit form's agent of a gateway job (`agent`, contract/agent.py): your Python `run(task, base_url, api_key)`
 * in the jail with its requirements, or a remote agent service's URL; with the episodes at once per instance and the
 * time limit of one episode's agent. The API's 422s show on the field they name.
 */
import { Field } from "../components/ui";
import type { JobForm } from "../lib/jobForm";

interface Props {
  form: JobForm;
  set: (key: keyof JobForm) => (e: { target: { value: string } }) => void;
  err: (...keys: string[]) => string | undefined;
}

export function AgentFields({ form, set, err }: Props) {
  const code = form["agent.where"] === "code";
  return (
    <div data-testid="agent-fields">
      <Field label="Agent"
        hint="each episode's agent talks to the policy through an OpenAI-compatible base_url the platform mints for it">
        <select name="agent_where" value={form["agent.where"]} onChange={set("agent.where")}>
          <option value="code">your code (runs in the jail)</option>
          <option value="url">a remote agent service (URL)</option>
        </select>
      </Field>
      {code ? (
        <>
          <Field label="Agent code: run(task, base_url, api_key) -> reward or None" error={err("agent.code", "agent")}>
            <textarea name="agent_code" className="mono" rows={12} value={form["agent.code"]} onChange={set("agent.code")} spellCheck={false} />
          </Field>
          <Field label="Requirements (one per line)" error={err("agent.requirements", "agent.requirements.*")}
            hint="installed from the platform's package index into a cached venv, e.g. openai-agents==0.24.0">
            <textarea name="agent_requirements" className="mono" rows={3} value={form["agent.requirements"]} onChange={set("agent.requirements")} spellCheck={false} />
          </Field>
          <Field label="Episodes per jail" error={err("agent.episodes_per_jail")}
            hint="consecutive episodes one jail runs, loading the code once (its globals carry over); 1: a fresh jail each">
            <input name="agent_episodes_per_jail" inputMode="numeric" value={form["agent.episodes_per_jail"]} onChange={set("agent.episodes_per_jail")} />
          </Field>
        </>
      ) : (
        <Field label="Agent URL" error={err("agent.url", "agent")} hint="the platform POSTs {task, base_url, api_key, episode} to {url}/rollout">
          <input name="agent_url" value={form["agent.url"]} onChange={set("agent.url")} placeholder="https://agents.example.com/my-agent" />
        </Field>
      )}
      <div className="row">
        <Field label="Episodes at once / instance" error={err("agent.concurrency")}>
          <input name="agent_concurrency" inputMode="numeric" value={form["agent.concurrency"]} onChange={set("agent.concurrency")} />
        </Field>
        <Field label="Agent timeout (s)" error={err("agent.timeout_s")} hint="past it the episode fails with that reason, not the job">
          <input name="agent_timeout_s" inputMode="decimal" value={form["agent.timeout_s"]} onChange={set("agent.timeout_s")} />
        </Field>
      </div>
    </div>
  );
}
