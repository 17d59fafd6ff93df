# The report tests open the HTML report in headless Chromium (Debian package).
APT_PACKAGES += chromium
