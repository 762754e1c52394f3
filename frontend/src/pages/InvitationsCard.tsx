/** Team invitations: the team's pending ones (invite, revoke: admins) and the signed-in user's own (accept, decline).
 * Nobody joins a team without accepting; an invitation attaches and creates no account. */
import { useState, type FormEvent } from "react";
import { api, unwrap } from "../api/client";
import { Card, formatTime } from "../components/ui";
import { useApiQuery } from "../lib/queries";
import { useSession } from "../session";

const ROLES = ["viewer", "member", "admin", "owner"];

/** The team's pending invitations, with the invite form and revoke buttons for admins. */
export function SentInvitations({ isAdmin, isOwner, onError }: { isAdmin: boolean; isOwner: boolean; onError: (err: unknown) => void }) {
  const sent = useApiQuery(["team", "invitations"], () => unwrap(api.GET("/api/v1/teams/current/invitations")));
  const revoke = async (id: number) => {
    try {
      await unwrap(api.DELETE("/api/v1/teams/current/invitations/{invitation_id}", { params: { path: { invitation_id: id } } }));
      await sent.reload();
    } catch (err) {
      onError(err);
    }
  };
  const rows = sent.data ?? [];
  return (
    <div data-testid="sent-invitations">
      {rows.length ? (
        <table className="table compact">
          <thead>
            <tr><th>Invited</th><th>Role</th><th>Expires</th><th /></tr>
          </thead>
          <tbody>
            {rows.map((i) => (
              <tr key={i.id}>
                <td>{i.email}</td>
                <td>{i.role}</td>
                <td>{i.status === "expired" ? <span className="muted">expired</span> : formatTime(i.expires_at)}</td>
                <td>
                  {isAdmin ? (
                    <button className="link danger" aria-label={`revoke invitation of ${i.email}`} onClick={() => void revoke(i.id)}>
                      revoke
                    </button>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {isAdmin ? <InviteForm isOwner={isOwner} onSent={sent.reload} onError={onError} /> : null}
    </div>
  );
}

function InviteForm({ isOwner, onSent, onError }: { isOwner: boolean; onSent: () => Promise<void>; onError: (err: unknown) => void }) {
  const [email, setEmail] = useState("");
  const [role, setRole] = useState("member");
  const [notice, setNotice] = useState<string | null>(null);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setNotice(null);
    try {
      const invitation = await unwrap(api.POST("/api/v1/teams/current/invitations", { body: { email, role: role as never } }));
      setEmail("");
      setNotice(`Invited ${invitation.email}: they join once they accept (signed in with that email).`);
      await onSent();
    } catch (err) {
      onError(err);
    }
  };
  return (
    <form className="row inline-form" onSubmit={submit}>
      <input placeholder="email" type="email" aria-label="email to invite" value={email} onChange={(e) => setEmail(e.target.value)} required />
      <select aria-label="invited role" value={role} onChange={(e) => setRole(e.target.value)}>
        {ROLES.filter((r) => isOwner || r !== "owner").map((r) => <option key={r} value={r}>{r}</option>)}
      </select>
      <button type="submit">Invite</button>
      {notice ? <span className="muted" data-testid="invite-notice">{notice}</span> : null}
    </form>
  );
}

/** The invitations addressed to the signed-in user; shown only while there are some. */
export function MyInvitations({ onError }: { onError: (err: unknown) => void }) {
  const { refresh, switchTeam } = useSession();
  const mine = useApiQuery(["auth", "invitations"], () => unwrap(api.GET("/api/v1/auth/invitations")));
  const [joined, setJoined] = useState<{ id: number; name: string } | null>(null);
  const answer = async (id: number, verb: "accept" | "decline") => {
    try {
      const params = { params: { path: { invitation_id: id } } };
      const result = await unwrap(
        verb === "accept"
          ? api.POST("/api/v1/auth/invitations/{invitation_id}/accept", params)
          : api.POST("/api/v1/auth/invitations/{invitation_id}/decline", params),
      );
      if (verb === "accept") setJoined({ id: result.team_id, name: result.team_name });
      await mine.reload();
      await refresh(); // the new team joins the team switcher
    } catch (err) {
      onError(err);
    }
  };
  const rows = mine.data ?? [];
  if (!rows.length && !joined) return null;
  return (
    <Card title="Your invitations">
      <div data-testid="my-invitations">
        {joined ? (
          <div className="banner banner-info" data-testid="joined-team">
            You joined team {joined.name}.{" "}
            <button className="link" onClick={() => void switchTeam(joined.id)}>Switch to {joined.name}</button>
          </div>
        ) : null}
        {rows.length ? (
          <table className="table compact">
            <thead>
              <tr><th>Team</th><th>Role</th><th>From</th><th>Expires</th><th /></tr>
            </thead>
            <tbody>
              {rows.map((i) => (
                <tr key={i.id}>
                  <td>{i.team_name}</td>
                  <td>{i.role}</td>
                  <td>{i.invited_by ?? "—"}</td>
                  <td>{formatTime(i.expires_at)}</td>
                  <td className="menu">
                    <button onClick={() => void answer(i.id, "accept")} aria-label={`accept invitation to ${i.team_name}`}>Accept</button>
                    <button className="link danger" onClick={() => void answer(i.id, "decline")} aria-label={`decline invitation to ${i.team_name}`}>
                      Decline
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        ) : null}
      </div>
    </Card>
  );
}

/** A count next to the Team link while invitations addressed to the user wait for an answer. */
export function InvitationsBadge() {
  const mine = useApiQuery(["auth", "invitations"], () => unwrap(api.GET("/api/v1/auth/invitations")));
  const count = mine.data?.length ?? 0;
  return count ? (
    <span className="badge" data-testid="invitations-badge" title={`${count} team invitation${count > 1 ? "s" : ""} to answer`}>
      {count}
    </span>
  ) : null;
}
