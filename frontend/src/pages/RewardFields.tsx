/**
 * The submit form's reward section: single-turn (a reward type from the schema's choices with its params, JSON or
 * YAML, and "Test this grader" opening the grader bench pre-filled), or a multi-turn environment (a built-in with
 * its params, python code, or a verifiers environment: VerifiersFields) with the episode limits. A spec with an environment has no reward; the same reward
 * fields may grade each episode's final answer instead (`environment.grader`, added to the steps' rewards).
 */
import { useState } from "react";
import { useNavigate } from "react-router";
import { Field } from "../components/ui";
import { AgentFields } from "./AgentFields";
import { VerifiersFields } from "./VerifiersFields";
import { ENVIRONMENTS, REWARD_TYPES } from "../lib/choices";
import { graderRoute } from "../lib/graderSpec";
import { DEFAULT_REWARD_CODE, REWARD_LENGTH_NOTE, type JobForm } from "../lib/jobForm";
import { parseObject } from "../lib/structured";

type Setter = (key: keyof JobForm) => (e: { target: { value: string } }) => void;
interface Props {
  form: JobForm;
  set: Setter;
  err: (...keys: string[]) => string | undefined;
}

/** `chooseType`: the environment type picked (chooseEnvironment: the code box follows the type's template). */
export function RewardFields({ form, set, err, chooseType }: Props & { chooseType: (type: string) => void }) {
  return (
    <>
      <Field label="Episodes" error={err("environment.type")}
        hint={form["environment.type"] ? "multi-turn: the environment replies and rewards" : "one prompt, one completion, scored by the reward"}>
        <select name="environment" value={form["environment.type"]} onChange={(e) => chooseType(e.target.value)}>
          <option value="">single turn (reward)</option>
          {ENVIRONMENTS.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
        </select>
      </Field>
      {form["environment.type"] ? <EnvironmentFields form={form} set={set} err={err} /> : <GraderFields form={form} set={set} err={err} at="reward" />}
    </>
  );
}

function EnvironmentFields({ form, set, err }: Props) {
  const python = form["environment.type"] === "python";
  return (
    <div data-testid="environment-fields">
      <div className="row">
        <Field label="Max turns" error={err("environment.max_turns")}>
          <input name="max_turns" inputMode="numeric" value={form["environment.max_turns"]} onChange={set("environment.max_turns")} />
        </Field>
        <Field label="Max episode tokens" error={err("environment.max_episode_tokens")}>
          <input name="max_episode_tokens" inputMode="numeric" value={form["environment.max_episode_tokens"]} onChange={set("environment.max_episode_tokens")} />
        </Field>
        <Field label="Step timeout (s)" error={err("environment.step_timeout_s")}>
          <input name="step_timeout_s" inputMode="decimal" value={form["environment.step_timeout_s"]} onChange={set("environment.step_timeout_s")} />
        </Field>
      </div>
      {form["environment.type"] === "openenv" && (
        <Field label="OpenEnv server URL" error={err("environment.url")} hint="each episode is one WebSocket session of the server; episodes a dead server loses are retried">
          <input name="environment_url" value={form["environment.url"]} onChange={set("environment.url")} placeholder="https://envs.example.com/my-env" />
        </Field>
      )}
      {form["environment.type"] === "gateway" ? <AgentFields form={form} set={set} err={err} />
        : form["environment.type"] === "verifiers" ? <VerifiersFields form={form} set={set} err={err} /> : python ? (
        <Field label="Environment code: reset(row), step(messages, row) (runs sandboxed)" error={err("environment.code", "environment")}>
          <textarea name="environment_code" className="mono" rows={9} value={form["environment.code"]} onChange={set("environment.code")} spellCheck={false} />
        </Field>
      ) : (
        <Field label="Environment params (JSON or YAML)" error={err("environment.params", "environment")} hint="empty: the built-in's defaults (docs/jobspec.md lists them)">
          <textarea name="environment_params" className="mono" rows={3} value={form["environment.params"]} onChange={set("environment.params")} spellCheck={false} />
        </Field>
      )}
      <Field label="Final-answer grader"
        hint="the episode's reward: the environment's step rewards, plus this grader's score of the last assistant message">
        <select name="environment_grader" value={form["environment.grader"]} onChange={set("environment.grader")}>
          <option value="off">none: the steps' rewards alone</option>
          <option value="on">grade the final answer</option>
        </select>
      </Field>
      {form["environment.grader"] === "on" && <GraderFields form={form} set={set} err={err} at="environment.grader" />}
    </div>
  );
}

/** The reward fields: the job's `reward`, or (`at` "environment.grader") the grader of an episode's final answer;
 * the API's errors are looked up under `at`. */
function GraderFields({ form, set, err, at }: Props & { at: "reward" | "environment.grader" }) {
  const navigate = useNavigate();
  const [linkError, setLinkError] = useState<string | null>(null);
  const python = form["reward.type"] === "python";
  const testGrader = async () => {
    try {
      const params = await parseObject(form["reward.params"], "reward params");
      setLinkError(null);
      navigate(graderRoute({ type: form["reward.type"], ...(Object.keys(params).length ? { params } : {}) }));
    } catch (caught) {
      setLinkError(caught instanceof Error ? caught.message : String(caught));
    }
  };
  return (
    <>
      <Field label={at === "reward" ? "Reward" : "Grader"} error={err(at, `${at}.type`)} hint="a reward type or grader from the list (python: your code, sandboxed)">
        <input name="reward" list="rewards" value={form["reward.type"]} onChange={set("reward.type")} />
        <datalist id="rewards">
          {REWARD_TYPES.map(([value, label]) => <option key={value} value={value} label={label} />)}
        </datalist>
      </Field>
      {python ? (
        <Field label="Reward code (runs sandboxed)" error={err(`${at}.code`)} hint={form["reward.code"] === DEFAULT_REWARD_CODE ? <span data-testid="reward-note">{REWARD_LENGTH_NOTE}</span> : undefined}>
          <textarea name="reward_code" className="mono" rows={5} value={form["reward.code"]} onChange={set("reward.code")} />
        </Field>
      ) : (
        <>
          <Field label="Reward params (JSON or YAML)" error={linkError ?? err("reward.params", `${at}.params`, `${at}.params.*`)}
            hint="a grader's fields, e.g. input / reference / operation; empty: the type's defaults">
            <textarea name="reward_params" className="mono" rows={5} value={form["reward.params"]} onChange={set("reward.params")} spellCheck={false} />
          </Field>
          <button type="button" className="link" onClick={() => void testGrader()}>Test this grader on a sample →</button>
        </>
      )}
    </>
  );
}
