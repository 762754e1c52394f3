/** Sign in, or create an account with its first team (POST /auth/register). */
import { useState, type FormEvent } from "react";
import { ErrorBanner, Field } from "../components/ui";
import { useSession } from "../session";

export function SignInPage() {
  const { signIn, register } = useSession();
  const [mode, setMode] = useState<"signin" | "register">("signin");
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [teamName, setTeamName] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      if (mode === "signin") await signIn(email, password);
      else await register(email, password, teamName);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div className="signin">
      <form className="card signin-card" onSubmit={submit}>
        <h1>StreamRL</h1>
        <p className="muted">RL post-training with stream generation</p>
        <ErrorBanner error={error} />
        <Field label="Email">
          <input name="email" type="email" autoComplete="username" value={email} onChange={(e) => setEmail(e.target.value)} required />
        </Field>
        <Field label="Password">
          <input name="password" type="password" autoComplete="current-password" value={password} onChange={(e) => setPassword(e.target.value)} required />
        </Field>
        {mode === "register" ? (
          <Field label="Team name">
            <input name="team_name" value={teamName} onChange={(e) => setTeamName(e.target.value)} required />
          </Field>
        ) : null}
        <button type="submit" className="primary" disabled={busy}>
          {mode === "signin" ? "Sign in" : "Create account"}
        </button>
        <button type="button" className="link" onClick={() => setMode(mode === "signin" ? "register" : "signin")}>
          {mode === "signin" ? "New here? Create an account and team" : "Have an account? Sign in"}
        </button>
      </form>
    </div>
  );
}
