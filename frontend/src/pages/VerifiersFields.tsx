/**
 * The submit form's verifiers environment (`environment.type: verifiers`, contract/verifiers.py): your verifiers
 * module in `code` (its `__all__` exporting the Taskset and any Env) or an installed taskset named in params
 * (`taskset`, optionally `env`), with the packages the jail installs (`requirements`), or your own verifiers env
 * server's address (`url`, tcp://host:port: verifiers' EnvServer plays the episodes, its model calls through the
 * episode's gateway). The API's 422s, which name `environment` for what the module or params cannot do in the jail
 * (or `environment.url` for an address the egress policy refuses), show on the field in use.
 */
import { Field } from "../components/ui";
import type { JobForm } from "../lib/jobForm";

interface Props {
  form: JobForm;
  set: (key: keyof JobForm) => (e: { target: { value: string } }) => void;
  err: (...keys: string[]) => string | undefined;
}

export function VerifiersFields({ form, set, err }: Props) {
  const code = form["environment.source"] === "code";
  const served = form["environment.source"] === "url";
  return (
    <div data-testid="verifiers-fields">
      <Field label="verifiers environment" hint="verifiers' own episode loop runs in the agent jail, its model calls through the episode's gateway">
        <select name="environment_source" value={form["environment.source"]} onChange={set("environment.source")}>
          <option value="code">your module (code)</option>
          <option value="installed">an installed taskset (params.taskset)</option>
          <option value="url">your verifiers env server (url)</option>
        </select>
      </Field>
      {served ? (
        <Field label="verifiers env server address" error={err("environment.url", "environment")}
          hint="your verifiers.v1.serve EnvServer (ZMQ), tcp://host:port; each dataset row is sent as a task's data, its model calls reach the episode's gateway; episodes a dead server loses are retried">
          <input name="environment_url" value={form["environment.url"]} onChange={set("environment.url")} placeholder="tcp://envs.example.com:5000" />
        </Field>
      ) : null}
      {code ? (
        <Field label="Environment code: a verifiers module, __all__ exporting its Taskset (and any Env)" error={err("environment.code", "environment")}
          hint="each dataset row's fields (prompt, answer, ...) become the task data of the taskset's task type; no tools (Toolsets run processes)">
          <textarea name="environment_code" className="mono" rows={14} value={form["environment.code"]} onChange={set("environment.code")} spellCheck={false} />
        </Field>
      ) : null}
      <Field label="Environment params (JSON or YAML)" error={err("environment.params", "environment.params.*", ...(code || served ? [] : ["environment"]))}
        hint={served ? "optional: concurrency (episodes per instance at once, default 4); your server holds the env's config"
          : code ? "optional: concurrency (episodes per instance at once, default 4), config (verifiers env config overrides)"
          : "taskset: the installed taskset's id; optional env (an installed env), config, concurrency"}>
        <textarea name="environment_params" className="mono" rows={3} value={form["environment.params"]} onChange={set("environment.params")} spellCheck={false}
          placeholder={code || served ? "concurrency: 4" : "taskset: reverse-text"} />
      </Field>
      {served ? null : (
        <Field label="Requirements (one per line)" error={err("environment.requirements", "environment.requirements.*")}
          hint="installed into the jail's cached venv; verifiers==0.4.0 is added unless you name verifiers yourself">
          <textarea name="environment_requirements" className="mono" rows={3} value={form["environment.requirements"]} onChange={set("environment.requirements")} spellCheck={false} />
        </Field>
      )}
    </div>
  );
}
