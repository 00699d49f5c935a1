// Countersign inbox: passkeys. Enrols a passkey on the passkeys page, and
// on the page of a request whose rule asks for a passkey, signs the
// approval statement before the approve or edit form is sent. No
// dependencies; loaded as a file (the page allows no inline scripts).
(function () {
  "use strict";

  function toB64u(buf) {
    var bytes = new Uint8Array(buf), s = "";
    for (var i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function fromB64u(s) {
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) s += "=";
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out.buffer;
  }

  // post sends a form to an inbox JSON route; it resolves with the answer,
  // or rejects with {code, message}.
  function post(url, fields) {
    return fetch(url, {
      method: "POST", credentials: "same-origin", headers: { "Accept": "application/json" },
      body: new URLSearchParams(fields)
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (r.ok) return body;
        var e = (body && body.error) || {};
        throw { code: e.code || "http_" + r.status, message: e.message || "The inbox answered " + r.status + "." };
      });
    });
  }

  // failure turns what a ceremony threw into {code, message}.
  function failure(err, what) {
    if (err && err.code && err.message) return err;
    var name = err && err.name;
    if (name === "NotAllowedError" || name === "AbortError") {
      return { code: "not_signed", message: what + " was cancelled, or no passkey answered in time. Try again." };
    }
    if (name === "InvalidStateError") {
      return { code: "already_enrolled", message: "This device's passkey is enrolled already." };
    }
    if (name === "SecurityError") {
      return { code: "wrong_site", message: "Passkeys work only at this server's own address; open the inbox at the address in its configuration." };
    }
    return { code: "failed", message: what + " failed: " + ((err && err.message) || err) };
  }

  function show(el, f) {
    if (!el) return;
    el.textContent = f ? f.message : "";
    if (f) el.setAttribute("data-reason", f.code); else el.removeAttribute("data-reason");
  }

  function field(form, name) { return form.elements.namedItem(name); }

  function supported() {
    return !!(window.PublicKeyCredential && navigator.credentials && window.isSecureContext);
  }

  // ---- Enrolment ------------------------------------------------------
  // creationOptions reads navigator.credentials.create's options from their
  // JSON form (binary fields base64url).
  function creationOptions(json) {
    if (PublicKeyCredential.parseCreationOptionsFromJSON) {
      try { return PublicKeyCredential.parseCreationOptionsFromJSON(json); } catch (e) { /* convert below */ }
    }
    var o = Object.assign({}, json);
    o.challenge = fromB64u(json.challenge);
    o.user = Object.assign({}, json.user, { id: fromB64u(json.user.id) });
    o.excludeCredentials = (json.excludeCredentials || []).map(function (c) {
      return Object.assign({}, c, { id: fromB64u(c.id) });
    });
    return o;
  }

  function credentialJSON(cred) {
    if (typeof cred.toJSON === "function") return cred.toJSON();
    var r = cred.response;
    return {
      id: cred.id, rawId: toB64u(cred.rawId), type: cred.type,
      authenticatorAttachment: cred.authenticatorAttachment || undefined,
      clientExtensionResults: cred.getClientExtensionResults ? cred.getClientExtensionResults() : {},
      response: {
        clientDataJSON: toB64u(r.clientDataJSON), attestationObject: toB64u(r.attestationObject),
        transports: r.getTransports ? r.getTransports() : []
      }
    };
  }

  function initEnrol(form) {
    var err = document.getElementById("enrol-error"), button = document.getElementById("enrol-submit");
    if (!supported()) {
      show(err, { code: "unsupported", message: "This browser cannot create passkeys here (it needs WebAuthn, over https or on localhost)." });
      return;
    }
    button.disabled = false;
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var csrf = field(form, "csrf").value, name = field(form, "name").value.trim();
      if (!name) { show(err, { code: "invalid_field", message: "Name the passkey first." }); return; }
      show(err, null);
      button.disabled = true;
      post("/passkeys/enrol/begin", { csrf: csrf }).then(function (begun) {
        // The API's options are the publicKey member, or wrap it.
        var json = begun.options.publicKey || begun.options;
        return navigator.credentials.create({ publicKey: creationOptions(json) }).then(function (cred) {
          if (!cred) throw { name: "NotAllowedError" };
          return post("/passkeys/enrol/finish", {
            csrf: csrf, enrolment_id: begun.enrolment_id, name: name, credential: JSON.stringify(credentialJSON(cred))
          });
        });
      }).then(function (done) {
        window.location.assign("/passkeys?enrolled=" + encodeURIComponent(done.passkey.id));
      }, function (e2) {
        show(err, failure(e2, "Enrolling"));
        button.disabled = false;
      });
    });
  }

  // ---- Signing an approval --------------------------------------------
  function sign(form) {
    var id = form.getAttribute("data-event-id");
    var fields = { csrf: field(form, "csrf").value, decision: field(form, "decision").value };
    if (fields.decision === "edit") fields.arguments = field(form, "arguments").value;
    return post("/approvals/" + encodeURIComponent(id) + "/statement", fields).then(function (st) {
      var options = {
        challenge: fromB64u(st.challenge), rpId: st.rp_id,
        userVerification: st.user_verification || "required", timeout: st.timeout_ms
      };
      // Without an enrolled passkey the browser offers whatever passkey it
      // holds for this site; the arbiter counts only enrolled ones.
      if (st.allow_credentials && st.allow_credentials.length) {
        options.allowCredentials = st.allow_credentials.map(function (c) { return { type: "public-key", id: fromB64u(c) }; });
      }
      return navigator.credentials.get({ publicKey: options }).then(function (cred) {
        if (!cred) throw { name: "NotAllowedError" };
        var r = cred.response;
        return {
          statement: st.statement, credential_id: cred.id, authenticator_data: toB64u(r.authenticatorData),
          client_data_json: toB64u(r.clientDataJSON), signature: toB64u(r.signature)
        };
      });
    });
  }

  function initStepUp() {
    var forms = document.querySelectorAll('form[data-step-up="passkey"]');
    var err = document.getElementById("passkey-error");
    if (forms.length === 0) return;
    if (!supported()) {
      show(err, { code: "unsupported", message: "This browser cannot sign with a passkey here (it needs WebAuthn, over https or on localhost). You can still reject." });
      return;
    }
    Array.prototype.forEach.call(forms, function (form) {
      Array.prototype.forEach.call(form.querySelectorAll("[data-needs-js]"), function (b) { b.disabled = false; });
    });
    // Capture: the keyboard shortcut's requestSubmit lands here too.
    document.addEventListener("submit", function (e) {
      var form = e.target;
      if (!form || form.getAttribute("data-step-up") !== "passkey") return;
      var assertionField = field(form, "passkey");
      if (assertionField.value) return; // signed: it goes
      e.preventDefault();
      if (form.getAttribute("data-signing") === "true") return;
      form.setAttribute("data-signing", "true");
      show(err, null);
      sign(form).then(function (assertion) {
        assertionField.value = JSON.stringify(assertion);
        form.submit();
      }, function (e2) {
        form.removeAttribute("data-signing");
        // An edit whose arguments do not read: the form says why, next to them.
        if (e2 && e2.code === "invalid_arguments" && field(form, "decision").value === "edit") { form.submit(); return; }
        show(document.getElementById("passkey-error"), failure(e2, "Signing"));
      });
    }, true);
  }

  function init() {
    var enrol = document.getElementById("enrol-form");
    if (enrol) initEnrol(enrol);
    initStepUp();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
